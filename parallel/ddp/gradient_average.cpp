// One flat all_reduce of many gradients (gradient_average.h).
#include "parallel/ddp/gradient_average.h"

#include "autograd/grad_mode.h"
#include "tensor/ops.h"

namespace spmd::dist {

void average_gradients(const std::vector<Tensor>& params, ProcessGroup* group, double scale) {
  if (params.empty()) return;
  NoGradGuard no_grad;
  const int ranks = group ? group->size() : 1;
  if (ranks == 1) {  // only scaled: in place, without the flat copy
    for (const Tensor& p : params) {
      if (!p.grad().defined()) Tensor(p).set_grad(ops::zeros_like(p));
      Tensor grad = p.grad();
      if (scale != 1.0) ops::mul_(grad, scale);
    }
    return;
  }
  std::vector<Tensor> flat_grads;
  for (const Tensor& p : params) {
    if (!p.grad().defined()) Tensor(p).set_grad(ops::zeros_like(p));
    flat_grads.push_back(ops::reshape(p.grad(), {p.numel()}));
  }
  Tensor flat = ops::cat(flat_grads, 0);
  ops::mul_(flat, scale / double(ranks));
  group->wait(group->all_reduce(flat), OpType::kAllReduce);
  int64_t offset = 0;
  for (const Tensor& p : params) {
    Tensor grad = p.grad();  // the average, copied back in place
    ops::copy_(grad, ops::view(ops::narrow(flat, 0, offset, p.numel()), p.shape()));
    offset += p.numel();
  }
}

}  // namespace spmd::dist
