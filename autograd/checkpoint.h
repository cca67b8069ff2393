// Activation checkpointing: trade compute for memory. checkpoint(fn, x) runs
// fn without recording a graph, so none of its intermediate activations are
// kept; it records one node that, in backward, reruns fn on the saved input
// with recording on and backpropagates through that fresh graph. Only x is
// kept between forward and backward. Parameters used inside fn get their
// gradients (and fire their hooks) during that inner backward.
//
// The random draws of the recomputation (dropout) are the forward's: the
// default generator's offset is rewound for the rerun and restored after,
// and it runs under the forward's autocast settings (bf16 products stay bf16
// even when backward is called outside the AutocastGuard).
//
// This is PyTorch's reentrant checkpoint: if x does not require grad there
// is no node to hang the recomputation on, so fn simply runs with recording
// on (correct, just not memory-saving).
//
// Selective checkpointing (kSaveProducts) keeps, besides x, the outputs of
// the products inside fn (linear, matmul, attention: selective_checkpoint.h),
// and the recomputation takes them as they are: only the cheap ops between
// them run again. It keeps more than kRecomputeAll and far less than no
// checkpoint (the products' inputs, the norms' and activations' outputs
// and the dropout masks are gone), and backward redoes no GEMM.
#pragma once

#include <functional>

#include "tensor/tensor.h"

namespace spmd::autograd {

// What a checkpointed function keeps from its forward besides its input.
enum class CheckpointPolicy {
  kRecomputeAll,  // nothing: every op runs again in backward ("full")
  kSaveProducts,  // the listed ops' outputs: the rest runs again ("selective", op level)
};

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                  CheckpointPolicy policy = CheckpointPolicy::kRecomputeAll);

}  // namespace spmd::autograd
