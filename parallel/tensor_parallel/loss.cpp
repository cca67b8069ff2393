// Vocabulary-parallel cross-entropy: forward in the order of loss.h (row
// maxima, then sums of exp and target logits, each reduced over the group),
// backward softmax - onehot on the local slice.
#include "parallel/tensor_parallel/loss.h"

#include "autograd/function.h"
#include "tensor/ops.h"

namespace spmd::dist::tp {
namespace {

using autograd::FunctionCtx;
using autograd::TensorList;

struct VocabParallelCrossEntropy : autograd::Function<VocabParallelCrossEntropy> {
  static constexpr const char* kName = "vocab_parallel_cross_entropy";

  static Tensor forward(FunctionCtx& ctx, const Tensor& logits, const Tensor& targets,
                        ProcessGroup* g, int64_t ignore_index) {
    const int64_t V_local = logits.size(-1), N = logits.numel() / V_local;
    const int64_t first = g->rank() * V_local;  // the first word this rank holds
    const Tensor x = ops::reshape(ops::to(logits, DType::kF32), {N, V_local});
    const Tensor t = ops::reshape(ops::to(targets, DType::kI64), {N});

    const Tensor valid = ops::ne(t, double(ignore_index));
    if (N > 0) {  // a target no rank holds would otherwise count as a logit of 0, silently
      const Tensor checked = ops::mul(t, ops::to(valid, DType::kI64));
      const int64_t lo = ops::amin(checked).item<int64_t>(),
                    hi = ops::amax(checked).item<int64_t>();
      SPMD_CHECK(lo >= 0 && hi < V_local * g->size(), "vocab_parallel_cross_entropy: targets ",
                 "must lie in [0, ", V_local * g->size(), "), got ", lo, " to ", hi);
    }

    // 1. The row maxima over the whole vocabulary, for a stable exp.
    Tensor row_max = ops::amax(x, {1});  // (N)
    g->wait(g->all_reduce(row_max, ReduceOp::kMax), OpType::kAllReduce);
    Tensor e = ops::sub(x, ops::unsqueeze(row_max, 1));  // (N, V/tp): the one buffer of this size
    ops::unary_(UnaryOp::kExp, e);

    // 2. Sums of exp, and the target's logit where this rank holds it.
    const Tensor mine =
        ops::logical_and(ops::ge(t, double(first)), ops::lt(t, double(first + V_local)));
    const Tensor local_target = ops::clamp(ops::sub(t, double(first)), 0, double(V_local - 1));
    const Tensor target_logit =
        ops::mul(ops::reshape(ops::gather(x, 1, ops::unsqueeze(local_target, 1)), {N}),
                 ops::to(mine, DType::kF32));
    Tensor sums = ops::stack({ops::sum(e, {1}), target_logit}, 0);  // (2, N)
    g->wait(g->all_reduce(sums), OpType::kAllReduce);
    const Tensor sum_exp = ops::select(sums, 0, 0), z = ops::select(sums, 0, 1);

    // 3. loss_row = log(sum exp(x - max)) + max - x_target, averaged over valid rows.
    const Tensor valid_f = ops::to(valid, DType::kF32);
    const Tensor rows = ops::mul(ops::sub(ops::add(ops::log(sum_exp), row_max), z), valid_f);
    const double count = ops::sum(valid_f).item<double>();
    ops::div_(e, ops::unsqueeze(sum_exp, 1));  // now the softmax slice
    ctx.save_for_backward({e});
    ctx.set("onehot_row", ops::to(ops::logical_and(mine, valid), DType::kF32));
    ctx.set("local_target", local_target);
    ctx.set("valid", valid_f);
    ctx.set("count", count);
    ctx.set("shape", logits.shape());
    ctx.set("dtype", logits.dtype());
    return ops::to(ops::div(ops::sum(rows), count), logits.dtype());
  }

  // d loss / d x = (softmax - onehot(target)) * valid / count, for this slice.
  static TensorList backward(FunctionCtx& ctx, const TensorList& grads) {
    // The saved softmax becomes the gradient in place: the graph drops it
    // after this backward, and no other (N, V/tp) buffer is needed.
    Tensor grad = ctx.saved_tensors()[0];  // (N, V/tp)
    const Tensor onehot = ctx.get<Tensor>("onehot_row");
    ops::scatter_add_(grad, 1, ops::unsqueeze(ctx.get<Tensor>("local_target"), 1),
                      ops::unsqueeze(ops::neg(onehot), 1));
    const double scale = ops::to(grads[0], DType::kF64).item<double>() / ctx.get<double>("count");
    ops::mul_(grad, ops::unsqueeze(ops::mul(ctx.get<Tensor>("valid"), scale), 1));
    grad = ops::to(ops::reshape(grad, ctx.get<Shape>("shape")), ctx.get<DType>("dtype"));
    return {grad, Tensor()};
  }
};

}  // namespace

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                    ProcessGroup& group, int64_t ignore_index) {
  SPMD_CHECK(logits.defined() && logits.ndim() >= 1 && is_floating(logits.dtype()),
             "vocab_parallel_cross_entropy: expected floating logits (..., V/tp)");
  SPMD_CHECK(targets.defined() && !is_floating(targets.dtype()),
             "vocab_parallel_cross_entropy: expected integer targets");
  SPMD_CHECK(targets.numel() * logits.size(-1) == logits.numel(),
             "vocab_parallel_cross_entropy: logits ", logits.shape(), " do not match targets ",
             targets.shape());
  return VocabParallelCrossEntropy::apply(logits, targets, &group, ignore_index);
}

}  // namespace spmd::dist::tp
