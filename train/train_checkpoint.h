// The trainer's checkpoints: a folder per saved step, a `latest` pointer,
// the last `keep` folders kept (0: all).
//
//   <folder>/step_00000040/      written by parallel/checkpoint (to a
//       shard_rank<R>.safetensors  temporary name, renamed when complete):
//       index.json                 the model's tensors and AdamW's moments,
//                                  each a piece with its placements
//       train_state.json         step, samples consumed, lr (rank 0)
//   <folder>/latest              "step_00000040", written last
//
// The moments are saved under their parameter's name
// ("optim.layers.0.attn.wqkv.weight.exp_avg") with the parameter's layout,
// so a run saved under one layout resumes under another: loading reads, for
// each rank, the slices its own pieces need. A folder that `latest` does not
// name (a save cut off mid-write) is never loaded.
#pragma once

#include <optional>
#include <string>

#include "autograd/nn/module.h"
#include "autograd/optim/optimizer.h"
#include "parallel/comm/process_group.h"

namespace spmd::train {

struct TrainState {
  int64_t step = 0;              // steps completed
  int64_t samples_consumed = 0;  // windows of the data order used, all ranks together
  double lr = 0;
};

// Saves after `state.step` steps. Collective over the world.
void save_checkpoint(const std::string& folder, const TrainState& state, const nn::Module& model,
                     const optim::Optimizer& optimizer, dist::ProcessGroup& world, int64_t keep);

// The bytes of this rank's file in the checkpoint of `step` (0 if it wrote none).
int64_t checkpoint_bytes_of_rank(const std::string& folder, int64_t step, int rank);

// The state of the checkpoint `latest` names, loaded into the model and the
// optimizer; nullopt when the folder has none. No communication.
std::optional<TrainState> load_latest_checkpoint(const std::string& folder, nn::Module& model,
                                                 optim::Optimizer& optimizer);

}  // namespace spmd::train
