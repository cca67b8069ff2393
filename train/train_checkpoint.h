// The trainer's checkpoints: a folder per saved step, a `latest` pointer,
// the last `keep` folders kept (0: all).
//
//   <folder>/step_00000040/      written by parallel/checkpoint (to a
//       shard_rank<R>.safetensors  temporary name, renamed when complete):
//       index.json                 the model's tensors and AdamW's moments,
//                                  each a piece with its placements and
//                                  the checksums of its bytes
//       train_state.json         step, samples consumed, lr, when the run
//                                  that wrote it started (rank 0, into the
//                                  folder before its rename)
//   <folder>/latest              "step_00000040", written last
//
// Every file is synced before the next is written, and every rename's
// folder after it (runtime/durable_file.h), so after a crash `latest` names
// a whole checkpoint. Pruning orders the step folders by the run that wrote
// them (its start time), then by step, and never removes the one `latest`
// names: a fresh run (checkpoint.resume = false) into a folder that holds an
// earlier run's higher steps keeps its own saves and prunes the earlier
// run's first.
//
// The moments are saved under their parameter's name
// ("optim.layers.0.attn.wqkv.weight.exp_avg") with the parameter's layout,
// so a run saved under one layout resumes under another: loading reads, for
// each rank, the slices its own pieces need. A folder that `latest` does not
// name (a save cut off mid-write) is never loaded.
//
// `params` are the tensors this rank trains, with the model's names: the
// whole model's, or one pipeline stage's. A tensor no strategy split is
// written whole, once: by rank 0, or, given `replicas` (the 1-D mesh of the
// ranks that hold the same stage), by that mesh's rank 0, so each stage's
// tensors come from one of its own ranks.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/optim/optimizer.h"
#include "parallel/comm/process_group.h"
#include "parallel/device_mesh.h"

namespace spmd::train {

struct TrainState {
  int64_t step = 0;              // steps completed
  int64_t samples_consumed = 0;  // windows of the data order used, all ranks together
  double lr = 0;
  int64_t run_started_unix_ns = 0;  // when the run that saved it started (orders the runs)
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Saves after `state.step` steps. Collective over the world:
// write_checkpoint of checkpoint_state, then a barrier, so that every rank
// returns once `latest` names the new step.
void save_checkpoint(const std::string& folder, const TrainState& state, const NamedTensors& params,
                     const optim::Optimizer& optimizer, dist::ProcessGroup& world, int64_t keep,
                     const dist::DeviceMesh* replicas = nullptr);

// Waits until the step folders the last prune removed are deleted (a
// thread of their own deletes them, after renaming them "<name>.pruned").
void finish_pruning();

// The two halves of a save, apart for an asynchronous one
// (async_checkpoint.h). checkpoint_state: the tensors a checkpoint holds, as
// views with their layouts (the parameters, and the optimizer's moments
// under "optim.<name>.exp_avg"...). write_checkpoint: the step folder
// (dist::save_sharded: the ranks meet through the world's store only, no
// collective; rank 0 puts train_state.json into it before its rename),
// then on rank 0 `latest` and pruning.
TensorMap checkpoint_state(const NamedTensors& params, const optim::Optimizer& optimizer,
                           const dist::DeviceMesh* replicas = nullptr);
void write_checkpoint(const std::string& folder, const TrainState& state, const TensorMap& tensors,
                      dist::ProcessGroup& world, int64_t keep);

// The folder of the checkpoint after `step` steps: "step_00000040".
std::string step_folder_name(int64_t step);

// The bytes of this rank's file in the checkpoint of `step` (0 if it wrote none).
int64_t checkpoint_bytes_of_rank(const std::string& folder, int64_t step, int rank);

// How a load checks the checkpoint against the model, both ways.
struct LoadCheck {
  // The whole model's parameter names (every stage's, not only this
  // rank's); empty: only this rank's tensors are checked (each must be there).
  std::vector<std::string> whole_model;
  // checkpoint.allow_partial_load: load what matches and leave the rest as
  // initialized (their AdamW moments zero), rather than refuse.
  bool allow_partial = false;
};

// The state of the checkpoint `latest` names, loaded into the model and the
// optimizer; nullopt when the folder has none. No communication. Refused,
// naming the file: a `latest` that names no step folder, a train_state.json
// that is not JSON or lacks a field, counts that are not whole numbers of
// at least 0, and a loaded tensor holding a value that is not finite (a
// checkpoint of a run that diverged, or one changed with its checksums).
// With
// `check.whole_model`, the checkpoint must hold exactly the model's tensors
// (each parameter and its two moments): a tensor the model does not have
// (another depth, an untied head saved for a tied model) or one it lacks is
// an InvalidArgument naming them, unless check.allow_partial, when
// `*partial_note` (if given) says what was skipped.
std::optional<TrainState> load_latest_checkpoint(const std::string& folder,
                                                 const NamedTensors& params,
                                                 optim::Optimizer& optimizer,
                                                 const dist::DeviceMesh* replicas = nullptr,
                                                 const LoadCheck& check = {},
                                                 std::string* partial_note = nullptr);

}  // namespace spmd::train
