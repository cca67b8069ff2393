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
#pragma once

#include <functional>

#include "tensor/tensor.h"

namespace spmd::autograd {

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x);

}  // namespace spmd::autograd
