// What a training step does differently when the model is cut into
// pipeline stages (parallel.pp > 1, parallelize.h): Parallelized's methods
// call these when its pipeline is on.
//
// A step runs the executor once per gradient-accumulation chunk (each chunk
// cut again into parallel.pp_microbatches), so each rank's stage gradients
// are the sum of the chunks' means; then, per step:
//
//   stage gradients averaged over dp_replicate (x cp) and divided by the
//   chunks (dist::average_gradients, parallel/ddp/gradient_average.h); under
//   FSDP first reduce-scattered, once per unit, then only divided; with
//   experts split, then ep's averages per stage (Parallelized)
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

// One step's pipeline steps over this rank's rows x, y: one per chunk of
// `chunks`, each under cp on this rank's chunks of every sequence. Returns
// the last stage's loss, the mean over the chunks, on every stage (an
// all_reduce over pp, issued after the step's backwards and before the
// gradients' sync: every rank in that order). Collective over the pp group
// (and the groups the stages use).
double pipeline_forward_backward(const Parallelized::Pipeline& pipeline, dist::ProcessGroup& cp,
                                 const Tensor& x, const Tensor& y, int64_t chunks);

// The stages' gradients of the step's backwards (`params`, in the same
// order on every rank of a stage), made the step's: under FSDP each unit's
// reduce-scattered into its shard (all issued, then waited for), else
// averaged over data.stage_average; then divided by the chunks. Collective
// over each stage's dp (and cp) ranks.
void sync_stage_gradients(const Parallelized::DataParallel& data, const std::vector<Tensor>& params,
                          int64_t chunks);

// The global gradient norm of a model whose stages hold `params` on each pp
// rank. Collective over `pp`.
double pipeline_grad_norm(const std::vector<Tensor>& params, dist::ProcessGroup& pp);

// The held-out loss: the first windows of the validation split, each run
// through the stages in order (activations (b, T, d_model) sent on, no
// graph kept), the mean on every rank. Collective over the pp group (and
// tp, when split, and cp).
double pipeline_val_loss(const Parallelized::Pipeline& pipeline, dist::ProcessGroup& tp,
                         dist::ProcessGroup& cp, int64_t d_model, const data::TextDataset& ds,
                         int64_t T, const Device& device);

}  // namespace spmd::train
