// Selective activation checkpointing, op by op: inside a checkpointed
// function (checkpoint.h, CheckpointPolicy::kSaveProducts) the outputs of
// the costly ops are kept from the forward, and the recomputation in
// backward takes them from here instead of computing them again. Every other
// op (norms, activations, dropout, RoPE, adds, copies) runs again.
//
// The costly ops are the ones that call keep_or_reuse() around their kernel:
// linear, matmul and scaled_dot_product_attention (autograd/), ring attention
// (parallel/context_parallel/). That is the save list of TorchTitan's
// op-level selective checkpointing (mm and the SDPA kernels), which hands
// PyTorch's torch.utils.checkpoint a policy saying, per op, "save" or
// "recompute". PyTorch does it with two dispatch modes that see every op: a
// caching one around the forward and a cached one around the recomputation.
// Here the listed ops ask one SavedOutputs that is in one of the two modes:
//
//   forward (kRecord):     y = W x      computed, and y kept
//                          z = gelu(y)  computed, nothing kept
//   recompute (kReplay):   y = W x      taken from what kRecord kept (the
//                                       node still saves x and W for dW, dx)
//                          z = gelu(y)  computed again from that y
//
// The recomputation must call the listed ops in the forward's order with the
// same shapes; it does, because it is the same function on the same input
// with the same random draws, and a mismatch is an error naming both ops.
// Not here: a per-op policy chosen by the caller (the list is fixed), and
// TorchTitan's variant that recomputes every second matmul.
#pragma once

#include <functional>
#include <vector>

#include "autograd/node.h"

namespace spmd::autograd {

// The outputs a checkpointed function's listed ops kept in its forward.
// Thread-compatible: one checkpoint's forward and recomputation run on one thread.
class SavedOutputs {
 public:
  enum class Mode { kRecord, kReplay };

  // Keeps `outputs` of `op` (a string literal: "linear").
  void record(const char* op, const TensorList& outputs);
  // The next op's outputs, new handles to the kept data (outside any graph).
  // Throws when the next kept op is not `op`, or none is left.
  TensorList replay(const char* op);
  // REQUIRES: every kept op was replayed (InvalidArgument naming the first left).
  void expect_all_replayed() const;

  size_t num_ops() const { return ops_.size(); }
  // The kept tensors' bytes: numel x element size, summed.
  size_t nbytes() const;

 private:
  struct Kept {
    const char* op;
    std::vector<SavedTensor> outputs;
  };
  std::vector<Kept> ops_;
  size_t next_ = 0;
};

// While alive, the listed ops on this thread record into (kRecord) or replay
// from (kReplay) `outputs`; the previous one (if any) is restored at the end.
class SavedOutputsGuard {
 public:
  SavedOutputsGuard(SavedOutputs& outputs, SavedOutputs::Mode mode);
  ~SavedOutputsGuard();
  SavedOutputsGuard(const SavedOutputsGuard&) = delete;
  SavedOutputsGuard& operator=(const SavedOutputsGuard&) = delete;

 private:
  SavedOutputs* previous_;
  SavedOutputs::Mode previous_mode_;
};

// A listed op's kernel call: compute() and nothing else outside a selective
// checkpoint; compute() with its outputs kept while one records; the kept
// outputs, and no call of compute(), while one replays. `op` is a string literal.
TensorList keep_or_reuse(const char* op, const std::function<TensorList()>& compute);
Tensor keep_or_reuse(const char* op, const std::function<Tensor()>& compute);

}  // namespace spmd::autograd
