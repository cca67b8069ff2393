// SavedOutputs: the listed ops' outputs, kept in forward order and handed
// back in the same order.
#include "autograd/selective_checkpoint.h"

#include <cstring>

#include "autograd/variable.h"

namespace spmd::autograd {
namespace {

// The SavedOutputs the listed ops on this thread use now, if any.
thread_local SavedOutputs* t_active = nullptr;
thread_local SavedOutputs::Mode t_mode = SavedOutputs::Mode::kRecord;

}  // namespace

void SavedOutputs::record(const char* op, const TensorList& outputs) {
  Kept kept{op, {}};
  for (const Tensor& t : outputs) kept.outputs.emplace_back(t);
  ops_.push_back(std::move(kept));
}

TensorList SavedOutputs::replay(const char* op) {
  SPMD_CHECK(next_ < ops_.size(), "selective checkpoint: the recomputation ran ", op, " after the ",
             ops_.size(),
             " listed ops the forward ran (it must run the same ops in the same order)");
  const Kept& kept = ops_[next_];
  SPMD_CHECK(std::strcmp(kept.op, op) == 0, "selective checkpoint: the recomputation ran ", op,
             " where the forward ran ", kept.op, " (listed op ", next_ + 1, " of ", ops_.size(),
             "; it must run the same ops in the same order)");
  ++next_;
  TensorList out;
  for (const SavedTensor& s : kept.outputs) out.push_back(s.defined() ? detach(s.get()) : Tensor());
  return out;
}

void SavedOutputs::expect_all_replayed() const {
  SPMD_CHECK(next_ == ops_.size(), "selective checkpoint: the recomputation ran ", next_,
             " of the ", ops_.size(), " listed ops the forward ran; the first left out is ",
             next_ < ops_.size() ? ops_[next_].op : "none");
}

size_t SavedOutputs::nbytes() const {
  size_t n = 0;
  for (const Kept& kept : ops_)
    for (const SavedTensor& s : kept.outputs)
      if (s.defined()) n += s.get().nbytes();
  return n;
}

SavedOutputsGuard::SavedOutputsGuard(SavedOutputs& outputs, SavedOutputs::Mode mode)
    : previous_(t_active), previous_mode_(t_mode) {
  t_active = &outputs;
  t_mode = mode;
}

SavedOutputsGuard::~SavedOutputsGuard() {
  t_active = previous_;
  t_mode = previous_mode_;
}

TensorList keep_or_reuse(const char* op, const std::function<TensorList()>& compute) {
  if (t_active == nullptr) return compute();
  if (t_mode == SavedOutputs::Mode::kReplay) return t_active->replay(op);
  TensorList outputs = compute();
  t_active->record(op, outputs);
  return outputs;
}

Tensor keep_or_reuse(const char* op, const std::function<Tensor()>& compute) {
  if (t_active == nullptr) return compute();
  return keep_or_reuse(op, [&] { return TensorList{compute()}; })[0];
}

}  // namespace spmd::autograd
