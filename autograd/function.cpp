// The non-template parts of custom Functions: the context and output wiring.
#include "autograd/function.h"

#include "autograd/engine.h"
#include "autograd/variable.h"

namespace spmd::autograd {

void FunctionCtx::save_for_backward(const TensorList& tensors) {
  saved_.clear();
  for (const Tensor& t : tensors) saved_.emplace_back(t);
}

TensorList FunctionCtx::saved_tensors() const {
  SPMD_CHECK(!released_,
             "trying to run backward through the graph a second time, after its "
             "saved tensors were freed; pass retain_graph = true to the first backward()");
  TensorList out;
  for (const SavedTensor& s : saved_) out.push_back(s.get());
  return out;
}

bool FunctionCtx::needs_input_grad(size_t i) const {
  return i < needs_.size() && needs_[i] && autograd::needs_input_grad(i);
}

void FunctionCtx::release() {
  saved_.clear();
  released_ = true;
}

namespace detail {
void attach_output(Tensor& out, const TensorList& inputs, const std::shared_ptr<Node>& node) {
  if (!out.defined() || !is_floating(out.dtype())) return;
  for (const Tensor& in : inputs) {
    if (in.is_same(out)) {
      out = detach(out);
      break;
    }
  }
  set_history(out, node);
}
}  // namespace detail

}  // namespace spmd::autograd
