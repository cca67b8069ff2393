// The pipeline's share of spmd-train's step (pipeline_train.h).
#include "train/pipeline_train.h"

#include <cmath>

#include "autograd/autograd.h"
#include "autograd/grad_mode.h"
#include "parallel/context_parallel/context_parallel.h"
#include "parallel/placement.h"
#include "tensor/ops.h"

namespace spmd::train {

double pipeline_grad_norm(const std::vector<Tensor>& params, dist::ProcessGroup& pp) {
  // This rank's stages' norm (over their tp pieces, if split), squared,
  // summed over the stages.
  const double mine = dist::grad_norm(params);
  Tensor sq = ops::scalar_tensor(mine * mine, {DType::kF64});
  pp.wait(pp.all_reduce(sq), dist::OpType::kAllReduce);
  return std::sqrt(sq.item<double>());
}

double from_last_stage(double value, bool is_last, dist::ProcessGroup& pp) {
  Tensor v = ops::scalar_tensor(is_last ? value : 0.0, {DType::kF64});
  pp.wait(pp.all_reduce(v), dist::OpType::kAllReduce);
  return v.item<double>();
}

double pipeline_val_loss(Parallelized& p, const data::TextDataset& ds, int64_t T,
                         const Device& device) {
  NoGradGuard no_grad;
  dist::ProcessGroup& pp = *p.pp;
  const int ranks = pp.size(), S = ranks * int(p.stages.size());
  const int64_t C = p.model->config.d_model;
  const auto batches = ds.eval_batches(data::Split::kVal, 4, T, 4);
  dist::ProcessGroup& cp = *p.cp;
  double total = 0;
  for (data::Batch b : batches) {
    if (cp.size() > 1)  // this rank's chunks of each sequence
      b.x = dist::cp::shard_sequence(b.x, 1, cp), b.y = dist::cp::shard_sequence(b.y, 1, cp);
    const int64_t tokens = b.x.size(1) / p.pipeline->activation_sequence_split;
    Tensor x;                                     // the activations between this rank's stages
    for (int s = pp.rank(); s < S; s += ranks) {  // stage s, on rank s % ranks
      dist::pp::TransformerStage& stage = *p.stages[size_t(s / ranks)];
      if (stage.is_first()) {
        x = ops::to(b.x, device);
      } else {
        x = ops::empty({b.x.size(0), tokens, C}, {DType::kF32, device});
        pp.wait(pp.recv(x, (s - 1) % ranks, s), dist::OpType::kRecv);
      }
      const Tensor out = stage.forward(x);
      if (stage.is_last()) {
        const Tensor y = ops::to(b.y, device);
        total += lm_loss(out, y, *p.tp).item<double>();
      } else {
        pp.wait(pp.send(ops::contiguous(out), (s + 1) % ranks, s + 1), dist::OpType::kSend);
      }
    }
  }
  const double mean = batches.empty() ? 0.0 : total / double(batches.size());
  Tensor loss = ops::scalar_tensor(from_last_stage(mean, p.stages.back()->is_last(), pp),
                                   {DType::kF64});
  if (cp.size() > 1)  // each cp rank saw its chunks: the sequence's loss is their mean
    cp.wait(cp.all_reduce(loss, dist::ReduceOp::kAvg), dist::OpType::kAllReduce);
  return loss.item<double>();
}

}  // namespace spmd::train
