// Gradients averaged after backward, bucket by bucket (gradient_average.h).
#include "parallel/ddp/gradient_average.h"

#include "autograd/grad_mode.h"
#include "tensor/ops.h"

namespace spmd::dist {
namespace {

int64_t bytes_of(const Tensor& t) { return t.numel() * int64_t(element_size(t.dtype())); }

bool fills_bucket(const Tensor& grad) {
  return bytes_of(grad) >= kAverageBucketBytes && grad.is_contiguous();
}

// One all_reduce of the gradients of params[begin, end): in place for one
// gradient of a bucket's size or more (contiguous, as backward makes it),
// else through a flat buffer of them, copied back after.
void average_bucket(const std::vector<Tensor>& params, size_t begin, size_t end,
                    ProcessGroup& group, double scale) {
  if (end - begin == 1 && fills_bucket(params[begin].grad())) {
    Tensor grad = params[begin].grad();
    ops::mul_(grad, scale);
    group.wait(group.all_reduce(grad), OpType::kAllReduce);
    return;
  }
  std::vector<Tensor> flat_grads;
  for (size_t i = begin; i < end; ++i)
    flat_grads.push_back(ops::reshape(params[i].grad(), {params[i].numel()}));
  Tensor flat = ops::cat(flat_grads, 0);
  ops::mul_(flat, scale);
  group.wait(group.all_reduce(flat), OpType::kAllReduce);
  int64_t offset = 0;
  for (size_t i = begin; i < end; ++i) {
    Tensor grad = params[i].grad();  // the average, copied back in place
    ops::copy_(grad, ops::view(ops::narrow(flat, 0, offset, params[i].numel()), params[i].shape()));
    offset += params[i].numel();
  }
}

}  // namespace

void average_gradients(const std::vector<Tensor>& params, ProcessGroup* group, double scale) {
  if (params.empty()) return;
  NoGradGuard no_grad;
  for (const Tensor& p : params)
    if (!p.grad().defined()) Tensor(p).set_grad(ops::zeros_like(p));
  const int ranks = group ? group->size() : 1;
  if (ranks == 1) {  // only scaled: in place
    for (const Tensor& p : params) {
      Tensor grad = p.grad();
      if (scale != 1.0) ops::mul_(grad, scale);
    }
    return;
  }
  // Buckets of consecutive gradients up to kAverageBucketBytes (a larger
  // gradient alone, in place).
  size_t begin = 0;
  int64_t bytes = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t b = bytes_of(params[i].grad());
    if (i > begin && bytes + b > kAverageBucketBytes) {
      average_bucket(params, begin, i, *group, scale / double(ranks));
      begin = i, bytes = 0;
    }
    bytes += b;
  }
  average_bucket(params, begin, params.size(), *group, scale / double(ranks));
}

}  // namespace spmd::dist
