// Parallelized's step (parallelize.h): forward and backward, the gradients'
// sync, the clip and AdamW, for a whole model; under pp each method hands
// the stages' share to pipeline_train.h.
#include <cmath>
#include <optional>

#include "autograd/autocast.h"
#include "autograd/autograd.h"
#include "autograd/grad_mode.h"
#include "autograd/nn/moe.h"
#include "autograd/optim/clip_grad.h"
#include "autograd/tensor_ops.h"
#include "parallel/context_parallel/context_parallel.h"
#include "parallel/placement.h"
#include "runtime/trace.h"
#include "tensor/ops.h"
#include "train/parallelize.h"  // Parallelized, whose methods these are
#include "train/pipeline_train.h"

namespace spmd::train {

Parallelized::Parallelized(std::shared_ptr<nn::Transformer> model, Groups groups, Pipeline pipeline,
                           DataParallel data, Experts experts, const TrainConfig& config)
    : model_(std::move(model)),
      groups_(std::move(groups)),
      pipeline_(std::move(pipeline)),
      data_(std::move(data)),
      experts_(std::move(experts)),
      microbatches_(config.training.microbatches),
      experts_in_model_(config.model.n_experts > 0),
      moe_aux_coef_(config.model.moe_aux_coef),
      bf16_(config.training.mixed_precision == "bf16") {
  if (pipeline_.on()) {
    for (const auto& st : pipeline_.stages)
      for (auto& named : st->named_parameters()) named_.push_back(std::move(named));
  } else {
    named_ = model_->named_parameters();  // under DDP the same tensors, which it names "module.*"
  }
  for (const auto& [name, p] : named_) params_.push_back(p);
  const OptimizerConfig& o = config.optimizer;
  optimizer_ =
      std::make_unique<optim::AdamW>(params_, optim::AdamWOptions{.lr = o.lr,
                                                                  .beta1 = o.beta1,
                                                                  .beta2 = o.beta2,
                                                                  .eps = o.eps,
                                                                  .weight_decay = o.weight_decay});
}

double Parallelized::forward_backward(const Tensor& x, const Tensor& y) {
  std::optional<AutocastGuard> bf16;  // the products in bf16, on any layout
  if (bf16_) bf16.emplace(DType::kBF16, /*cpu=*/true);
  if (pipeline_.on()) return pipeline_forward_backward(pipeline_, *groups_.cp, x, y, microbatches_);
  const int64_t rows = x.size(0) / microbatches_;
  double loss = 0;
  for (int64_t c = 0; c < microbatches_; ++c) {
    const bool last = c + 1 == microbatches_;  // the gradients are reduced in its backward only
    const Losses l = chunk_forward_backward(ops::narrow(x, 0, c * rows, rows),
                                            ops::narrow(y, 0, c * rows, rows), last);
    loss += l.loss.item<double>() / double(microbatches_);
  }
  return loss;
}

void Parallelized::sync_gradients() {
  if (pipeline_.on()) sync_stage_gradients(data_, params_, microbatches_);
  if (experts_.ep) sync_expert_gradients();
}

double Parallelized::clip_grad_norm(double max_norm) {
  const double norm =
      pipeline_.on() ? pipeline_grad_norm(params_, *pipeline_.pp) : dist::grad_norm(params_);
  // A norm that is not finite leaves the gradients as they are (clipping by
  // it would turn every one into NaN), for the trainer to name the first bad one.
  if (max_norm > 0 && std::isfinite(norm)) optim::clip_grads_with_norm_(params_, max_norm, norm);
  return norm;
}

void Parallelized::optimizer_step(double lr) {
  optimizer_->set_lr(lr);
  optimizer_->step();
}

double Parallelized::batch_loss(double loss) const {
  return reduce_scalar(*groups_.batch, loss, dist::ReduceOp::kAvg);
}

double Parallelized::val_loss(const data::TextDataset& ds, int64_t T, const Device& device) {
  std::optional<AutocastGuard> bf16;
  if (bf16_) bf16.emplace(DType::kBF16, /*cpu=*/true);
  if (pipeline_.on())
    return pipeline_val_loss(pipeline_, *groups_.tp, *groups_.cp, model_->config.d_model, ds, T,
                             device);
  NoGradGuard no_grad;
  const auto batches = ds.eval_batches(data::Split::kVal, 4, T, 4);
  double total = 0;
  for (const data::Batch& b : batches)
    total += forward(ops::to(b.x, device), ops::to(b.y, device)).loss.item<double>();
  const double mean = batches.empty() ? 0.0 : total / double(batches.size());
  // Each cp rank saw its chunks: the sequence's loss is their mean.
  return reduce_scalar(*groups_.cp, mean, dist::ReduceOp::kAvg);
}

Parallelized::Losses Parallelized::forward(Tensor x, Tensor y) {
  if (groups_.cp->size() > 1) {  // this rank's chunks of each sequence
    x = dist::cp::shard_sequence(x, 1, *groups_.cp);
    y = dist::cp::shard_sequence(y, 1, *groups_.cp);
  }
  nn::Module& module = data_.ddp ? static_cast<nn::Module&>(*data_.ddp) : *model_;
  const Tensor loss = lm_loss(module(x), y, *groups_.tp);
  if (!experts_in_model_) return {loss, loss};
  return {loss, add(loss, mul(nn::moe_aux_loss(*model_), moe_aux_coef_))};
}

Parallelized::Losses Parallelized::chunk_forward_backward(const Tensor& x, const Tensor& y,
                                                          bool sync) {
  if (data_.fsdp_root) data_.fsdp_root->set_requires_gradient_sync(sync);
  std::optional<dist::DistributedDataParallel::NoSync> accumulate;  // DDP: no average this time
  if (data_.ddp && !sync) accumulate.emplace(*data_.ddp);
  Losses l;
  {
    TraceSpan span("forward");
    l = forward(x, y);
  }
  TraceSpan span("backward");
  backward(div(l.objective, double(microbatches_)));
  return l;
}

// Dense gradients averaged over dp x ep and the experts' over dp, or, when
// FSDP's reduce-scatters averaged the dense ones, the experts' alone: on
// each stage under pp (ep's lines lie within a stage's ranks), else on the
// model.
void Parallelized::sync_expert_gradients() {
  std::vector<nn::Module*> parts;
  if (pipeline_.on()) {
    for (const auto& st : pipeline_.stages) parts.push_back(st->as_module().get());
  } else {
    parts.push_back(model_.get());
  }
  for (nn::Module* part : parts) {
    if (data_.sharded()) {
      dist::ep::sync_expert_gradients(*part, *experts_.ep);
    } else {
      dist::ep::sync_gradients(*part, *experts_.ep);
    }
  }
}

}  // namespace spmd::train
