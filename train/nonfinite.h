// A step whose loss or gradient norm is not finite (a loss gone to inf or
// NaN, a bad parameter, an lr too large) must not update the model. The
// check sits after the gradient norm and before the optimizer step, so
// neither the update nor that step's checkpoint ever holds its values.
//
// Both numbers are reduced over the ranks before the check (the loss over
// the batch's ranks and the pipeline's stages, the norm over every shard of
// every parameter), so every rank holds the same two values and takes the
// same branch: no rank stops while another waits for it in a collective.
// Then, on every rank together:
//
//   within training.skip_nonfinite_steps (llm.c's and Megatron's habit):
//       a warning naming the step, which is skipped: no update, and the
//       next step zeroes the gradients
//   past it (by default, 0: at the first such step):
//       every rank throws the same message: the step, the first rank that
//       holds a non-finite tensor and its first by name (a parameter, else
//       a gradient), and the checkpoint that stays the last
//
// Not here: a non-finite value in a checkpoint, refused as it is loaded
// (train_checkpoint.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/comm/process_group.h"
#include "train/config.h"
#include "train/train_checkpoint.h"

namespace spmd::train {

class NonfiniteCheck {
 public:
  // `world` must outlive the check.
  NonfiniteCheck(const TrainConfig& config, dist::ProcessGroup& world);

  // Whether `step` (from 0) may update the model: true when `loss` and
  // `grad_norm` are finite; false when it is to be skipped (rank 0 prints
  // the warning). Throws Error when the run must stop. `params`: this
  // rank's, with their gradients; last_saved: the steps completed by the
  // last checkpoint (0: none).
  // REQUIRES: every rank calls it with the same loss and grad_norm.
  // Collective over the world when either is not finite.
  bool may_update(int64_t step, double loss, double grad_norm, const NamedTensors& params,
                  int64_t last_saved);

 private:
  // "the gradient of layers.0.mlp.w1.weight on rank 1 (element 17 is nan)",
  // the first over the ranks; "" when every tensor is finite.
  std::string first_nonfinite_tensor(const NamedTensors& params);

  dist::ProcessGroup& world_;
  int64_t allowed_;               // training.skip_nonfinite_steps
  std::string folder_;            // checkpoint.folder
  std::vector<int64_t> skipped_;  // the steps skipped so far
};

// The first element of `t` that is not finite, as "element 17 is nan"; ""
// when every element is (or `t` holds no floating-point values).
std::string first_nonfinite_element(const Tensor& t);

// "nan", "inf", "-inf", or the number.
std::string number_text(double v);

}  // namespace spmd::train
