// What spmd-train's loop does differently when the model is cut into
// pipeline stages (parallel.pp > 1, parallelize.h).
//
// A step runs the executor once per gradient-accumulation chunk (each chunk
// cut again into parallel.pp_microbatches), so each rank's stage gradients
// are the sum of the chunks' means; then, per step:
//
//   stage gradients averaged over dp_replicate and divided by the chunks
//   (dist::average_gradients, parallel/ddp/gradient_average.h); under FSDP
//   first reduce-scattered, once per unit (reduce_stage_gradients), then
//   only divided; with experts split, then ep's averages per stage
//   grad norm: each rank's stages' squares (over their tp pieces), summed over pp
//   loss: the last stage's, given to every stage (a sum over pp of it and zeros);
//   with experts each stage's backward also carries its MoE blocks'
//   balancing loss (the executor's stage_objective, set by parallelize)
//
// The held-out loss runs the stages forward only, one batch after another.
#pragma once

#include <vector>

#include "autograd/data/text_dataset.h"
#include "parallel/comm/process_group.h"
#include "train/parallelize.h"

namespace spmd::train {

// The global gradient norm of a model whose stages hold `params` on each pp
// rank. Collective over `pp`.
double pipeline_grad_norm(const std::vector<Tensor>& params, dist::ProcessGroup& pp);

// The last stage's `value` on every rank of `pp` (the others pass anything,
// NaN included). Collective over `pp`.
double from_last_stage(double value, bool is_last, dist::ProcessGroup& pp);

// The held-out loss: the first windows of the validation split, each run
// through the stages in order (activations sent on, no graph kept), the
// mean on every rank. Collective over the pp group (and tp, when split).
double pipeline_val_loss(Parallelized& p, const data::TextDataset& ds, int64_t T,
                         const Device& device);

}  // namespace spmd::train
