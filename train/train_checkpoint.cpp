// Checkpoints: the tensors through parallel/checkpoint, the rest as small
// files rank 0 writes and renames into place.
#include "train/train_checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <tuple>

#include "autograd/grad_mode.h"
#include "parallel/checkpoint/checkpoint.h"
#include "parallel/checkpoint/index.h"
#include "parallel/placement.h"
#include "runtime/durable_file.h"
#include "runtime/fault.h"
#include "runtime/logging.h"
#include "tensor/ops.h"
#include "train/nonfinite.h"

namespace spmd::train {
namespace {

namespace fs = std::filesystem;

// Writes `text` to path through a temporary name, a rename and syncs.
void write_atomically(const fs::path& path, const std::string& text) {
  try {
    replace_durably(path.string(), text);
  } catch (const Error& e) {
    SPMD_THROW(Error, "checkpoint: ", e.what());
  }
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  SPMD_CHECK(in.good(), "checkpoint: cannot read ", path.string(), " (", std::strerror(errno), ")");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The tensors to save or load: each parameter under its name, and the
// optimizer's state (its state_dict(), or tensors shaped like it to load
// into) under the parameter's name ("optim.<name>.exp_avg"), each moment
// carrying its parameter's layout. A tensor without one gets, given
// `replicas`, Replicate() on that mesh (on a view: the parameter itself
// keeps none).
TensorMap checkpoint_tensors(const NamedTensors& params, const TensorMap& state,
                             const dist::DeviceMesh* replicas) {
  TensorMap out;
  auto placed = [&](const Tensor& t, const Tensor& param) {
    Tensor v = ops::view(t, t.shape());
    if (param.layout_meta() || replicas == nullptr) {
      v.set_layout_meta(param.layout_meta());
    } else {
      dist::set_placements(v, *replicas, {dist::Placement::replicate()}, t.shape());
    }
    return v;
  };
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, param] = params[i];
    out[name] = placed(param, param);
    for (const char* moment : {"exp_avg", "exp_avg_sq"}) {
      auto it = state.find("state." + std::to_string(i) + "." + moment);
      if (it != state.end()) out["optim." + name + "." + moment] = placed(it->second, param);
    }
  }
  return out;
}

// A step folder, and where it stands among the others: the start of the
// run that saved it, then its step. A folder whose train_state.json is
// missing or unreadable (a save cut off between its rename and that file)
// counts as the oldest.
struct SavedStep {
  int64_t run_started = 0, step = 0;
  fs::path path;
  bool operator<(const SavedStep& o) const {
    return std::tie(run_started, step, path) < std::tie(o.run_started, o.step, o.path);
  }
};

SavedStep saved_step(const fs::path& dir) {
  SavedStep s{0, 0, dir};
  try {
    const auto js = nlohmann::json::parse(read_file(dir / "train_state.json"));
    s.run_started = js.value("run_started_unix_ns", int64_t(0));
    s.step = js.value("step", int64_t(0));
  } catch (const std::exception&) {
    s.run_started = s.step = 0;
  }
  return s;
}

// Deletes pruned step folders on a thread of its own, so that a save does
// not wait while the filesystem frees their blocks (tens of ms for a shard
// of 62 MiB, with the other ranks waiting at the save's barrier). The
// folders were renamed to "<name>.pruned" first: out of the checkpoint at
// once, under a name no resume reads, and deleted by the next prune should
// the process die before this thread is done. Joined before the next
// deletion, at the end of training (finish_pruning), and at exit.
class Deleter {
 public:
  ~Deleter() { join(); }
  void remove(std::vector<fs::path> paths) {
    join();
    thread_ = std::thread([paths = std::move(paths)] {
      for (const fs::path& p : paths) {
        std::error_code ec;
        fs::remove_all(p, ec);
        if (ec)
          SPMD_LOG_WARN("checkpoint: cannot delete the pruned ", p.string(), " (", ec.message(),
                        "): it takes disk space until deleted by hand");
      }
    });
  }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::thread thread_;
};

Deleter& deleter() {
  static Deleter d;
  return d;
}

// Removes all but the `keep` newest step folders; never `latest`. Also
// deletes what an earlier prune renamed and did not finish deleting, and
// what a save cut short left (dist::save_leftover: its "<name>.tmp", and a
// "<name>.old" set aside unless `latest` still names <name>, whose resume
// reads it: latest_step_folder). Rank 0 prunes right after its own
// save, the one save of this job in flight; a folder has one job
// (runtime/folder_lock.h).
void prune(const std::string& folder, const std::string& latest, int64_t keep) {
  deleter().join();
  std::vector<SavedStep> steps;
  std::vector<fs::path> doomed;
  for (const auto& e : fs::directory_iterator(folder)) {
    if (!e.is_directory() || e.path().filename().string().rfind("step_", 0) != 0) continue;
    const fs::path ext = e.path().extension();
    if (ext.empty()) {
      steps.push_back(saved_step(e.path()));
    } else if (ext == ".pruned" || dist::save_leftover(e.path().string(), latest)) {
      doomed.push_back(e.path());
    }
  }
  std::sort(steps.begin(), steps.end());
  int64_t to_remove = int64_t(steps.size()) - keep;
  for (const SavedStep& s : steps) {
    if (to_remove <= 0) break;
    if (s.path.filename() == latest) continue;
    fs::path pruned = s.path;
    pruned += ".pruned";
    fs::remove_all(pruned);  // a leftover of the same name, from a run cut short
    fs::rename(s.path, pruned);
    doomed.push_back(pruned);
    --to_remove;
  }
  sync_folder(folder);
  if (!doomed.empty()) deleter().remove(std::move(doomed));
}

}  // namespace

void finish_pruning() { deleter().join(); }

std::string step_folder_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", (long long)step);
  return buf;
}

TensorMap checkpoint_state(const NamedTensors& params, const optim::Optimizer& optimizer,
                           const dist::DeviceMesh* replicas) {
  return checkpoint_tensors(params, optimizer.state_dict(), replicas);
}

void write_checkpoint(const std::string& folder, const TrainState& state, const TensorMap& tensors,
                      dist::ProcessGroup& world, int64_t keep) {
  const fs::path dir = fs::path(folder) / step_folder_name(state.step);
  // train_state.json goes into the step folder with its index, before the
  // folder has its name: a folder with the name always has it.
  const nlohmann::json train_state = {{"step", state.step},
                                      {"samples_consumed", state.samples_consumed},
                                      {"lr", state.lr},
                                      {"run_started_unix_ns", state.run_started_unix_ns}};
  dist::save_sharded(tensors, dir.string(), world,
                     {{"train_state.json", train_state.dump(2) + "\n"}});
  if (world.rank() == 0) {
    write_atomically(fs::path(folder) / "latest", step_folder_name(state.step) + "\n");
    fault_point("checkpoint.latest");
    if (keep > 0) prune(folder, step_folder_name(state.step), keep);
    fault_point("checkpoint.pruned");
  }
}

void save_checkpoint(const std::string& folder, const TrainState& state, const NamedTensors& params,
                     const optim::Optimizer& optimizer, dist::ProcessGroup& world, int64_t keep,
                     const dist::DeviceMesh* replicas) {
  write_checkpoint(folder, state, checkpoint_state(params, optimizer, replicas), world, keep);
  world.wait(world.barrier(), dist::OpType::kBarrier);  // every rank sees the new latest
}

int64_t checkpoint_bytes_of_rank(const std::string& folder, int64_t step, int rank) {
  const fs::path file = fs::path(folder) / step_folder_name(step) /
                        ("shard_rank" + std::to_string(rank) + ".safetensors");
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  return ec ? 0 : int64_t(size);
}

namespace {

// "a, b, c and 4 more" of at most `shown` names.
std::string some_of(const std::vector<std::string>& names, size_t shown = 6) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < shown; ++i)
    out += str_cat(i ? ", " : "", "'", names[i], "'");
  if (names.size() > shown) out += str_cat(" and ", names.size() - shown, " more");
  return out;
}

// A count of train_state.json (`js` an object): a whole number, at least 0.
int64_t count_in(const nlohmann::json& js, const char* key, const fs::path& path) {
  const nlohmann::json& v = js.at(key);
  SPMD_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0, path.string(), ": \"", key, "\" is ",
             v.dump(), ": it must be a whole number, at least 0");
  return v.get<int64_t>();
}

// A checkpoint's train_state.json, checked: every error names the file.
TrainState read_train_state(const fs::path& path) {
  TrainState state;
  try {
    const auto js = nlohmann::json::parse(read_file(path));
    const nlohmann::json& lr = js.at("lr");
    SPMD_CHECK(lr.is_number() && std::isfinite(lr.get<double>()), path.string(), ": \"lr\" is ",
               lr.dump(), ": it must be a finite number");
    state = {count_in(js, "step", path), count_in(js, "samples_consumed", path), lr.get<double>()};
  } catch (const nlohmann::json::exception& e) {
    SPMD_THROW(InvalidArgument, path.string(), " is not a train state (", e.what(),
               "): it needs step, samples_consumed and lr");
  }
  return state;
}

// The step folder `latest` names: refused naming `latest` when it names
// none (an empty file, or a folder removed by hand). A save of that same
// step (a fresh run's, into the folder) cut between the two renames of a
// filesystem that cannot exchange them leaves the folder absent and the
// checkpoint it named set aside whole: that one (dist::saved_folder).
fs::path latest_step_folder(const std::string& folder) {
  const fs::path latest = fs::path(folder) / "latest";
  std::string name = read_file(latest);
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  const std::string fix =
      "; point it at a step folder there, or start afresh with checkpoint.resume = false";
  SPMD_CHECK(!name.empty() && name.find('/') == std::string::npos, latest.string(),
             " names no step folder (it holds \"", name, "\")", fix);
  const fs::path dir = fs::path(folder) / name;
  const fs::path saved = dist::saved_folder(dir.string());
  if (saved != dir) {
    SPMD_LOG_WARN("checkpoint: ", latest.string(), " names ", name, ", which is absent, and ",
                  saved.string(), " holds it: a save of the same step was cut between ",
                  "its two renames; resuming from ", saved.filename().string());
    return saved;
  }
  SPMD_CHECK(fs::is_directory(dir), latest.string(), " names ", name, ", which is not a folder in ",
             folder, fix);
  return dir;
}

// Every value loaded is finite: a checkpoint saved by a run that diverged,
// or one changed since with its checksums, is refused naming the tensor
// and the files that hold it.
void check_finite(const TensorMap& loaded, const fs::path& dir) {
  for (const auto& [name, t] : loaded) {
    const std::string element = first_nonfinite_element(t);
    if (element.empty()) continue;
    std::set<std::string> files;
    const dist::CheckpointIndex index = dist::read_checkpoint_index(dir.string());
    if (const auto it = index.tensors.find(name); it != index.tensors.end())
      for (const dist::SavedBlock& b : it->second.blocks) files.insert(b.file);
    SPMD_THROW(InvalidArgument, "the checkpoint at ", dir.string(), " holds a value that is not ",
               "finite in '", name, "' (", some_of({files.begin(), files.end()}), "; ", element,
               " of this rank's piece): a run that diverged saved it, or it was changed since; ",
               "resume from an earlier checkpoint (point ", (dir.parent_path() / "latest").string(),
               " at one) or start afresh with checkpoint.resume = false");
  }
}

// The checkpoint's tensors against the whole model's, both ways: empty when
// they match, else what differs, named.
std::string mismatch(const dist::CheckpointIndex& index, const std::vector<std::string>& model) {
  std::set<std::string> expected;
  for (const std::string& n : model) {
    expected.insert(n);
    expected.insert("optim." + n + ".exp_avg");
    expected.insert("optim." + n + ".exp_avg_sq");
  }
  std::vector<std::string> unused, missing;
  for (const auto& [name, t] : index.tensors)
    if (!expected.count(name)) unused.push_back(name);
  for (const std::string& n : expected)
    if (!index.tensors.count(n)) missing.push_back(n);
  std::string out;
  if (!unused.empty())
    out = str_cat("it holds ", unused.size(), " tensor(s) the model does not have (",
                  some_of(unused), ")");
  if (!missing.empty())
    out += str_cat(out.empty() ? "it " : ", and ", "lacks ", missing.size(),
                   " tensor(s) the model has (", some_of(missing), ")");
  return out;
}

}  // namespace

std::optional<TrainState> load_latest_checkpoint(
    const std::string& folder, const NamedTensors& params, optim::Optimizer& optimizer,
    const dist::DeviceMesh* replicas, const LoadCheck& check, std::string* partial_note) {
  if (!fs::exists(fs::path(folder) / "latest")) return std::nullopt;
  const fs::path dir = latest_step_folder(folder);
  const TrainState state = read_train_state(dir / "train_state.json");

  // Tensors to fill: the parameters, and moments shaped like them.
  NoGradGuard no_grad;
  TensorMap moments;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string key = "state." + std::to_string(i) + ".";
    moments[key + "exp_avg"] = ops::zeros_like(params[i].second);
    moments[key + "exp_avg_sq"] = ops::zeros_like(params[i].second);
    moments[key + "step"] = ops::scalar_tensor(double(state.step), {DType::kI64});
  }
  TensorMap wanted = checkpoint_tensors(params, moments, replicas);
  if (!check.whole_model.empty()) {
    const dist::CheckpointIndex index = dist::read_checkpoint_index(dir.string());
    const std::string differs = mismatch(index, check.whole_model);
    SPMD_CHECK(differs.empty() || check.allow_partial, "the checkpoint at ", dir.string(),
               " does not match the model: ", differs,
               "; checkpoint.allow_partial_load = true loads what matches and leaves the rest as "
               "initialized");
    if (!differs.empty()) {
      for (auto it = wanted.begin(); it != wanted.end();)
        it = index.tensors.count(it->first) ? std::next(it) : wanted.erase(it);
      // A parameter whose moments stay zero starts AdamW afresh: its bias
      // correction counts from step 0, not from the checkpoint's step.
      for (size_t i = 0; i < params.size(); ++i)
        if (!index.tensors.count("optim." + params[i].first + ".exp_avg"))
          moments["state." + std::to_string(i) + ".step"] = ops::scalar_tensor(0.0, {DType::kI64});
      if (partial_note)
        *partial_note =
            str_cat("partial load of ", dir.string(), " (checkpoint.allow_partial_load): ", differs,
                    "; those the model has stay as initialized");
    }
  }
  dist::load_sharded(wanted, dir.string());
  check_finite(wanted, dir);
  optimizer.load_state_dict(moments);
  return state;
}

}  // namespace spmd::train
