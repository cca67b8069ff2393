// The pipeline's share of spmd-train's step (pipeline_train.h).
#include "train/pipeline_train.h"

#include <cmath>

#include "autograd/autograd.h"
#include "autograd/grad_mode.h"
#include "parallel/context_parallel/context_parallel.h"
#include "parallel/ddp/gradient_average.h"
#include "parallel/placement.h"
#include "tensor/ops.h"

namespace spmd::train {
namespace {

// The last stage's `value` on every rank of `pp` (the others pass anything,
// NaN included).
double from_last_stage(double value, bool is_last, dist::ProcessGroup& pp) {
  return reduce_scalar(pp, is_last ? value : 0.0);
}

}  // namespace

double pipeline_forward_backward(const Parallelized::Pipeline& pipeline, dist::ProcessGroup& cp,
                                 const Tensor& x, const Tensor& y, int64_t chunks) {
  const int64_t rows = x.size(0) / chunks;
  double loss = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    Tensor xc = ops::narrow(x, 0, c * rows, rows), yc = ops::narrow(y, 0, c * rows, rows);
    if (cp.size() > 1)  // the stages run on this rank's chunks of each sequence
      xc = dist::cp::shard_sequence(xc, 1, cp), yc = dist::cp::shard_sequence(yc, 1, cp);
    loss += pipeline.executor->step(xc, yc) / double(chunks);  // NaN but on the last stage
  }
  return from_last_stage(loss, pipeline.stages.back()->is_last(), *pipeline.pp);
}

void sync_stage_gradients(const Parallelized::DataParallel& data, const std::vector<Tensor>& params,
                          int64_t chunks) {
  std::vector<dist::FsdpModule*> units;  // under FSDP: one reduce-scatter per unit per step
  for (const auto& u : data.stage_units) units.push_back(u.get());
  dist::FsdpModule::reduce_gradients(units);
  dist::average_gradients(params, data.stage_average.get(), 1.0 / double(chunks));
}

double pipeline_grad_norm(const std::vector<Tensor>& params, dist::ProcessGroup& pp) {
  // This rank's stages' norm (over their tp pieces, if split), squared,
  // summed over the stages.
  const double mine = dist::grad_norm(params);
  return std::sqrt(reduce_scalar(pp, mine * mine));
}

double pipeline_val_loss(const Parallelized::Pipeline& pipeline, dist::ProcessGroup& tp,
                         dist::ProcessGroup& cp, int64_t d_model, const data::TextDataset& ds,
                         int64_t T, const Device& device) {
  NoGradGuard no_grad;
  dist::ProcessGroup& pp = *pipeline.pp;
  const int ranks = pp.size(), S = ranks * int(pipeline.stages.size());
  const auto batches = ds.eval_batches(data::Split::kVal, 4, T, 4);
  double total = 0;
  for (data::Batch b : batches) {
    if (cp.size() > 1)  // this rank's chunks of each sequence
      b.x = dist::cp::shard_sequence(b.x, 1, cp), b.y = dist::cp::shard_sequence(b.y, 1, cp);
    const int64_t tokens = b.x.size(1) / pipeline.executor->activation_sequence_split;
    Tensor x;                                     // the activations between this rank's stages
    for (int s = pp.rank(); s < S; s += ranks) {  // stage s, on rank s % ranks
      dist::pp::TransformerStage& stage = *pipeline.stages[size_t(s / ranks)];
      if (stage.is_first()) {
        x = ops::to(b.x, device);
      } else {
        x = ops::empty({b.x.size(0), tokens, d_model}, {DType::kF32, device});
        pp.wait(pp.recv(x, (s - 1) % ranks, s), dist::OpType::kRecv);
      }
      const Tensor out = stage.forward(x);
      if (stage.is_last()) {
        const Tensor y = ops::to(b.y, device);
        total += lm_loss(out, y, tp).item<double>();
      } else {
        pp.wait(pp.send(ops::contiguous(out), (s + 1) % ranks, s + 1), dist::OpType::kSend);
      }
    }
  }
  const double mean = batches.empty() ? 0.0 : total / double(batches.size());
  const double loss = from_last_stage(mean, pipeline.stages.back()->is_last(), pp);
  // Each cp rank saw its chunks: the sequence's loss is their mean.
  return reduce_scalar(cp, loss, dist::ReduceOp::kAvg);
}

}  // namespace spmd::train
