// run_checks.h: the checks of a run before it builds anything.
#include "train/run_checks.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "autograd/data/gpt2_bpe.h"
#include "autograd/data/token_file.h"
#include "parallel/agreement.h"
#include "parallel/comm/object_collectives.h"
#include "runtime/error.h"
#include "runtime/resource_limits.h"

namespace spmd::train {
namespace {

namespace fs = std::filesystem;

// A folder the run writes into: made now if absent, then checked writable.
// A file in the way, or a place where no folder can be made (/proc, a
// read-only mount), is refused naming the key.
void prepare_folder(const std::string& key, const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  const fs::path wanted = fs::absolute(path, ec);
  fs::path at = wanted;  // the nearest part of the path that exists
  while (!fs::exists(at, ec) && at.has_parent_path() && at != at.parent_path())
    at = at.parent_path();
  SPMD_CHECK(
      fs::is_directory(at, ec), key, " = \"", path, "\" ",
      at == wanted ? std::string("names a file") : str_cat("lies under ", at.string(), ", a file"),
      ", not a folder: the run writes a folder there");
  fs::create_directories(wanted, ec);
  SPMD_CHECK(!ec, key, " = \"", path, "\": cannot make the folder (", ec.message(),
             "): the run writes a folder there");
  SPMD_CHECK(::access(wanted.c_str(), W_OK | X_OK) == 0, key, " = \"", path,
             "\": cannot write into the folder (", std::strerror(errno), ")");
}

// What this rank alone can find wrong: its CPUs, its folders; rank 0 also
// takes the folders' locks (one job writes a folder at a time).
void check_this_rank(const TrainConfig& config, int rank, std::vector<FolderLock>& locks) {
  const int threads = config.training.threads, cpus = cpus_available();
  SPMD_CHECK(threads <= cpus, "training.threads = ", threads, " is more than the ", cpus,
             " CPUs this process may run on: threads beyond one per CPU only take turns, and "
             "every op waits for the slowest (0 lets OpenMP choose one per CPU)");
  const std::pair<const char*, const std::string*> folders[] = {
      {"checkpoint.folder", &config.checkpoint.folder},
      {"metrics.run_folder", &config.metrics.run_folder}};
  std::vector<fs::path> locked;
  for (const auto& [key, path] : folders) {
    prepare_folder(key, *path);
    if (rank != 0 || path->empty()) continue;
    std::error_code ec;
    bool seen = false;
    for (const fs::path& p : locked) seen = seen || fs::equivalent(p, *path, ec);
    if (seen) continue;
    locks.emplace_back(*path, key);
    locked.emplace_back(*path);
  }
}

// The text's GPT-2 tokens, its vocabulary checked against the model's.
data::TextDataset read_gpt2_dataset(const TrainConfig& c) {
  const data::Gpt2Tokenizer gpt2 = data::Gpt2Tokenizer::load(c.data.gpt2_vocab);
  SPMD_CHECK(gpt2.vocab_size() <= c.model.vocab_size, "data.gpt2_vocab: ", c.data.gpt2_vocab,
             "/encoder.json holds ", gpt2.vocab_size(), " tokens, more than model.vocab_size ",
             c.model.vocab_size,
             ": set model.vocab_size to at least that (GPT-2 pads it to 50304)");
  const std::string path = c.data.path.empty() ? SPMD_EMBEDDED_TEXT : c.data.path;
  // At most a token per byte: the text, its int64 tokens, and their train and
  // val copies, 17 bytes of memory per byte of file (as TextDataset::from_file).
  const std::string text = read_file_bounded(path, "data.path", /*bytes_per_byte=*/17);
  return data::TextDataset::from_tokens(gpt2.encode(text), c.data.eval_fraction);
}

// The text's bytes, its GPT-2 tokens, or a BPE token file's tokens (data.tokenizer).
data::TextDataset read_dataset(const TrainConfig& c) {
  if (c.data.tokenizer == "byte") {
    const std::string path = c.data.path.empty() ? SPMD_EMBEDDED_TEXT : c.data.path;
    return data::TextDataset::from_file(path, c.data.eval_fraction);
  }
  if (c.data.tokenizer == "gpt2") return read_gpt2_dataset(c);
  data::TokenFile file = data::read_token_file(c.data.path);
  int64_t needed = file.vocab_size;  // 0 in llm.c's files: the largest token's id + 1
  for (int64_t t : file.tokens) needed = std::max(needed, file.vocab_size > 0 ? 0 : t + 1);
  SPMD_CHECK(needed <= c.model.vocab_size, "model.vocab_size ", c.model.vocab_size,
             " is less than the vocabulary of ", c.data.path, " (", needed,
             " tokens): set model.vocab_size to at least that");
  return data::TextDataset::from_tokens(std::move(file.tokens), c.data.eval_fraction);
}

}  // namespace

std::vector<FolderLock> check_run(const TrainConfig& config, dist::ProcessGroup& world) {
  check_layout(config, world.size());
  SPMD_CHECK(config.optimizer.name == "adamw", "optimizer.name = \"", config.optimizer.name,
             "\": spmd-train steps with AdamW only");
  dist::check_same_text_on_every_rank(world, "the config", to_toml(config));
  std::string why;
  std::vector<FolderLock> locks;
  try {
    check_this_rank(config, world.rank(), locks);
  } catch (const Error& e) {
    why = e.what();
  }
  refuse_together(world, why);
  return locks;
}

void refuse_together(dist::ProcessGroup& world, const std::string& why) {
  if (world.size() == 1) {
    if (!why.empty()) SPMD_THROW(InvalidArgument, why);
    return;
  }
  const auto all = dist::all_gather_bytes(world, std::vector<uint8_t>(why.begin(), why.end()));
  for (int r = 0; r < world.size(); ++r)
    if (!all[size_t(r)].empty())
      SPMD_THROW(InvalidArgument, r == world.rank() ? "" : str_cat("rank ", r, ": "),
                 std::string(all[size_t(r)].begin(), all[size_t(r)].end()));
}

int cpus_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

data::TextDataset load_dataset(const TrainConfig& c) {
  const int64_t T = c.model.seq_len;
  data::TextDataset dataset = read_dataset(c);
  const int64_t tokens = dataset.size(data::Split::kTrain),
                windows = std::max<int64_t>((tokens - 1) / T, 0);
  SPMD_CHECK(windows >= c.training.global_batch, "data.path = \"",
             c.data.path.empty() ? "(the embedded text)" : c.data.path, "\" leaves ", tokens,
             " tokens to train on (data.eval_fraction = ", c.data.eval_fraction, " held out), ",
             windows, windows == 1 ? " window" : " windows", " of model.seq_len + 1 = ", T + 1,
             " tokens: fewer than training.global_batch = ", c.training.global_batch,
             " (it needs at least ", c.training.global_batch * T + 1, " tokens to train on)");
  SPMD_CHECK(c.metrics.eval_every == 0 || !dataset.eval_batches(data::Split::kVal, 4, T, 1).empty(),
             "metrics.eval_every = ", c.metrics.eval_every, " asks for held-out evals, but ",
             "data.eval_fraction = ", c.data.eval_fraction, " holds out ",
             dataset.size(data::Split::kVal), " tokens, fewer than one eval batch of 4 x ", T + 1);
  return dataset;
}

}  // namespace spmd::train
