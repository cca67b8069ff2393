// spmd-train never fails silently: a step whose loss or gradient norm is not
// finite stops the run (or, with training.skip_nonfinite_steps, is skipped)
// before its update and before any save of it, on every rank together; a
// checkpoint holding such a value is refused at load; and what the run would
// otherwise find out late (a folder it cannot write, more threads than CPUs,
// a text too short, a train state it cannot read, a GPT-2 vocabulary larger
// than the model's) is refused at start, naming the key or the file. tests/reliability/hostile.py
// runs the same refusals through the spmd-train binary, checking its exit status.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <regex>
#include <set>

#include "autograd/data/gpt2_bpe.h"
#include "parallel/agreement.h"
#include "tensor/copy.h"
#include "tests/train/trainer_test_util.h"
#include "train/nonfinite.h"
#include "train/run_checks.h"

using namespace spmd;
using namespace spmd::dist::testing;
using namespace spmd::train::testing;
namespace fs = std::filesystem;

namespace {

// lr 1e30: the first update throws the parameters to ~1e30, and the next
// forward's logits overflow: its loss, gradients and norm are not finite.
std::vector<std::string> diverging(const std::string& folder) {
  return {"optimizer.lr=1e30", "schedule.warmup_steps=0", "checkpoint.folder=\"" + folder + "\"",
          "checkpoint.interval=1", "checkpoint.keep=0"};
}

// N of the message's "step N: ...".
int64_t stopped_at(const std::string& message) {
  std::smatch m;
  REQUIRE(std::regex_search(message, m, std::regex("^step (\\d+): ")));
  return std::stoll(m[1]);
}

// The step folders in `folder`, by name.
std::set<std::string> step_folders(const std::string& folder) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.is_directory()) out.insert(e.path().filename().string());
  return out;
}

std::string latest_of(const std::string& folder) {
  std::ifstream in(folder + "/latest");
  std::string name;
  in >> name;
  return name;
}

std::string tmp(const std::string& what) {
  return "/tmp/spmd_test_refusals_" + what + "_" + std::to_string(::getpid());
}

}  // namespace

TEST_CASE("a non-finite loss stops the run before the update, naming the step, rank and tensor",
          "[train][nonfinite]") {
  const std::string folder = tmp("nonfinite");
  fs::remove_all(folder);
  const train::TrainConfig c = base(6, diverging(folder));
  const std::string what = error_of([&] { run_single(c); });
  INFO(what);
  const int64_t step = stopped_at(what);
  CHECK(step >= 1);
  CHECK_THAT(what, Catch::Contains("the loss is ") && Catch::Contains("on rank 0 (element ") &&
                       Catch::Contains("the run stops before the optimizer step") &&
                       Catch::Contains("training.skip_nonfinite_steps"));
  CHECK_THAT(what, Catch::Contains("the gradient of ") || Catch::Contains("the parameter "));
  // The steps before it were saved, that step and none after it: the last
  // checkpoint is the one the message names, and it holds finite values only.
  std::set<std::string> want;
  for (int64_t s = 1; s <= step; ++s) want.insert(train::step_folder_name(s));
  CHECK(step_folders(folder) == want);
  CHECK(latest_of(folder) == train::step_folder_name(step));
  CHECK_THAT(what,
             Catch::Contains(folder + "/" + train::step_folder_name(step) + " stays the last"));
  for (const auto& [name, t] : whole_parameters(c, folder))
    CHECK(train::first_nonfinite_element(t).empty());
  fs::remove_all(folder);
}

TEST_CASE("training.skip_nonfinite_steps skips that many steps without an update, then stops",
          "[train][nonfinite]") {
  // Every step after the first is not finite (the first update left the
  // parameters at ~1e30): with 3 allowed, a 4-step run skips steps 1-3
  // and ends with the parameters of its first update (to f32 rounding: the
  // same step's sums can round differently where its buffers lie
  // otherwise; an update would move them by ~lr, or make them NaN).
  const std::string skip = tmp("skip"), once = tmp("once");
  fs::remove_all(skip), fs::remove_all(once);
  std::vector<std::string> o = diverging(skip);
  o.push_back("training.skip_nonfinite_steps=3");
  const train::TrainConfig c = base(4, o);
  const std::vector<double> losses = run_single(c);
  REQUIRE(losses.size() == 4);
  CHECK(std::isfinite(losses[0]));
  for (size_t s = 1; s < 4; ++s) CHECK_FALSE(std::isfinite(losses[s]));
  run_single(base(1, diverging(once)));
  const train::NamedTensors skipped = whole_parameters(c, skip), first = whole_parameters(c, once);
  REQUIRE(skipped.size() == first.size());
  for (size_t i = 0; i < first.size(); ++i) {
    const std::vector<float> x = ops::to_vector<float>(skipped[i].second),
                             y = ops::to_vector<float>(first[i].second);
    float scale = 0, diff = 0;
    for (size_t j = 0; j < y.size(); ++j) {
      scale = std::max(scale, std::abs(y[j]));
      diff = std::max(diff, std::abs(x[j] - y[j]));
    }
    INFO(first[i].first << " differs by " << diff << " of " << scale);
    CHECK(diff <= 1e-5f * scale);
  }
  fs::remove_all(skip), fs::remove_all(once);

  // With 1 allowed: step 1 skipped, step 2 stops the run.
  o = diverging(skip);
  o.push_back("training.skip_nonfinite_steps=1");
  const std::string what = error_of([&] { run_single(base(4, o)); });
  CHECK_THAT(what,
             Catch::StartsWith("step 2: ") &&
                 Catch::Contains("(training.skip_nonfinite_steps = 1: step 1 skipped already)"));
  fs::remove_all(skip);
}

TEST_CASE("on 2 ranks every rank stops at the same step with the same message",
          "[train][nonfinite]") {
  for (const char* layout : {"parallel.dp_replicate=2", "parallel.dp_shard=2"}) {
    const std::string folder = tmp("nonfinite_ranks");
    fs::remove_all(folder);
    std::vector<std::string> o = diverging(folder);
    o.push_back(layout);
    const train::TrainConfig c = base(6, o);
    run_world(
        2,
        [&](dist::ProcessGroup& world) {
          std::string what;
          try {
            train::run_training(c, borrow(world));
          } catch (const Error& e) {
            what = e.what();
          }
          expect(what.rfind("step ", 0) == 0 && what.find(" on rank ") != std::string::npos, layout,
                 " rank ", world.rank(), ": ", what.empty() ? "it ran on" : what);
          // Nothing hangs: the world still meets, and every rank says the same.
          dist::check_same_text_on_every_rank(world, "the message", what);
        },
        std::chrono::seconds(60));
    fs::remove_all(folder);
  }
}

TEST_CASE("a checkpoint holding a non-finite value is refused on resume, naming tensor and file",
          "[train][nonfinite][checkpoint]") {
  // A run's checkpoint, loaded, given a NaN and saved again (so its
  // checksums are right): what a run that diverged before this check would
  // have left.
  const std::string good = tmp("good"), bad = tmp("bad");
  fs::remove_all(good), fs::remove_all(bad);
  run_single(base(2, {"checkpoint.folder=\"" + good + "\""}));
  const train::TrainConfig c = base(3, {"checkpoint.folder=\"" + bad + "\""});
  auto model = std::make_shared<nn::Transformer>(transformer_config(c.model), 1);
  optim::AdamW opt(model->parameters(), {});
  const train::NamedTensors named = model->named_parameters();
  const auto state = train::load_latest_checkpoint(good, named, opt);
  REQUIRE(state.has_value());
  const auto& [name, param] = named[2];
  {
    NoGradGuard no_grad;
    std::vector<float> v = ops::to_vector<float>(param);
    v[5] = std::nanf("");
    ops::copy_(param, ops::from_vector(v, param.shape()));
  }
  dist::InitOptions init;
  init.store = std::make_shared<HashStore>();
  init.world_size = 1, init.rank = 0;
  auto one = dist::init_process_group(init);
  train::save_checkpoint(bad, *state, named, opt, *one, 0);
  dist::destroy_process_group(one);

  const std::string what = error_of([&] { run_single(c); });
  CHECK_THAT(what, Catch::Contains("the checkpoint at " + bad +
                                   "/step_00000002 holds a value that "
                                   "is not finite in '" +
                                   name + "'") &&
                       Catch::Contains("'shard_rank0.safetensors'; element 5 is nan") &&
                       Catch::Contains("checkpoint.resume = false"));
  // On 2 ranks under FSDP the NaN lies in rank 0's shard: both ranks refuse.
  std::vector<std::string> o = {"checkpoint.folder=\"" + bad + "\"", "parallel.dp_shard=2"};
  const train::TrainConfig fsdp = base(3, o);
  run_world(2, [&](dist::ProcessGroup& world) {
    std::string refused;
    try {
      train::run_training(fsdp, borrow(world));
    } catch (const Error& e) {
      refused = e.what();
    }
    expect(refused.find("is not finite in '" + name + "'") != std::string::npos, "rank ",
           world.rank(), ": ", refused.empty() ? "it resumed" : refused);
  });
  fs::remove_all(good), fs::remove_all(bad);
}

TEST_CASE("spmd-train refuses at start a folder it cannot write and more threads than CPUs",
          "[train][errors]") {
  const std::string file = tmp("file");
  std::ofstream(file) << "x";
  CHECK_THROWS_WITH(run_single(base(1, {"checkpoint.folder=\"" + file + "\""})),
                    Catch::Contains("checkpoint.folder = \"" + file + "\" names a file"));
  CHECK_THROWS_WITH(run_single(base(1, {"metrics.run_folder=\"" + file + "\""})),
                    Catch::Contains("metrics.run_folder = \"" + file + "\" names a file"));
  CHECK_THROWS_WITH(run_single(base(1, {"metrics.run_folder=\"" + file + "/runs\""})),
                    Catch::Contains("lies under " + file + ", a file"));
  fs::remove(file);
  // Where no folder can be made: refused before the first step, not at the first save.
  CHECK_THROWS_WITH(run_single(base(1, {"checkpoint.folder=\"/proc/spmd_ck\""})),
                    "checkpoint.folder = \"/proc/spmd_ck\": cannot make the folder (No such file "
                    "or directory): the run writes a folder there");
  const int cpus = train::cpus_available();
  CHECK_THROWS_WITH(run_single(base(1, {"training.threads=" + std::to_string(cpus + 1)})),
                    Catch::StartsWith(str_cat("training.threads = ", cpus + 1, " is more than the ",
                                              cpus, " CPUs this process")));
}

TEST_CASE("spmd-train names the file: a text too short, a train state or latest it cannot use",
          "[train][errors]") {
  // A text too short for one batch of windows: its tokens and those needed.
  const std::string text = tmp("short_text");
  std::ofstream(text) << std::string(100, 'a');
  CHECK_THROWS_WITH(run_single(base(1, {"data.path=\"" + text + "\""})),
                    Catch::Contains("data.path = \"" + text + "\" leaves 90 tokens") &&
                        Catch::Contains("5 windows of model.seq_len + 1 = 17 tokens") &&
                        Catch::Contains("fewer than training.global_batch = 8 (it needs at least "
                                        "129 tokens to train on)"));
  fs::remove(text);

  const std::string folder = tmp("bad_state");
  fs::remove_all(folder);
  const std::vector<std::string> o = {"checkpoint.folder=\"" + folder + "\""};
  run_single(base(2, o));
  const std::string state = folder + "/step_00000002/train_state.json";
  std::ifstream in(state);
  const std::string saved((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(state) << "{\"step\": ";
  CHECK_THROWS_WITH(run_single(base(3, o)), Catch::StartsWith(state + " is not a train state ("));
  std::ofstream(state) << "{\"step\": -7, \"samples_consumed\": 16, \"lr\": 0.001}";
  CHECK_THROWS_WITH(run_single(base(3, o)),
                    state + ": \"step\" is -7: it must be a whole number, at least 0");
  std::ofstream(state) << "{\"step\": 2.5, \"samples_consumed\": 16, \"lr\": 0.001}";
  CHECK_THROWS_WITH(run_single(base(3, o)),
                    state + ": \"step\" is 2.5: it must be a whole number, at least 0");
  std::ofstream(state) << saved;
  std::ofstream(folder + "/latest") << "step_00000009\n";
  CHECK_THROWS_WITH(run_single(base(3, o)),
                    Catch::StartsWith(folder +
                                      "/latest names step_00000009, which is not a "
                                      "folder in " +
                                      folder));
  // Back to a whole checkpoint: a run already at training.steps trains no step.
  std::ofstream(folder + "/latest") << "step_00000002\n";
  CHECK(run_single(base(2, o)).empty());
  CHECK(run_single(base(3, o)).size() == 1);
  fs::remove_all(folder);
}

TEST_CASE("data.tokenizer = gpt2: a vocabulary larger than the model's is refused, naming it",
          "[train][errors][gpt2]") {
  // A vocabulary in GPT-2's format: the 256 bytes (id = the byte; each byte
  // written as its character of GPT-2's map) and one merge, a b -> "ab" (256).
  const std::string dir = tmp("gpt2_vocab");
  fs::create_directories(dir);
  std::ofstream json(dir + "/encoder.json");
  json << "{";
  for (int b = 0; b < 256; ++b) {
    const char32_t c = data::gpt2_byte_char(uint8_t(b));
    json << "\"\\u" << std::hex << std::setw(4) << std::setfill('0') << uint32_t(c)
         << "\": " << std::dec << b << ", ";
  }
  json << "\"ab\": 256}";
  json.close();
  std::ofstream(dir + "/vocab.bpe") << "#version: 0.2\na b\n";
  const std::string text = tmp("gpt2_text");
  std::string abab;
  for (int i = 0; i < 1000; ++i) abab += "ab";
  std::ofstream(text) << abab;
  const std::vector<std::string> o = {"data.tokenizer=\"gpt2\"", "data.gpt2_vocab=\"" + dir + "\"",
                                      "data.path=\"" + text + "\""};
  std::vector<std::string> small = o;
  small.push_back("model.vocab_size=256");
  CHECK_THROWS_WITH(
      train::load_dataset(base(1, small)),
      "data.gpt2_vocab: " + dir +
          "/encoder.json holds 257 tokens, more than "
          "model.vocab_size 256: set model.vocab_size to at least that (GPT-2 pads it "
          "to 50304)");
  // With room for it: "abab..." is one chunk, merged into 1,000 tokens "ab".
  std::vector<std::string> fits = o;
  fits.push_back("model.vocab_size=257");
  const data::TextDataset d = train::load_dataset(base(1, fits));
  CHECK(d.size(data::Split::kTrain) + d.size(data::Split::kVal) == 1000);
  fs::remove_all(dir);
  fs::remove(text);
}
