// The block kernels of elementwise.cpp, for the fused kernels that run the
// same arithmetic (fused.cpp): one capability's copy, like kernels.h.
//
// A block is n elements of the compute type (float or double), n a whole
// number of 64-byte vectors, starting on a 64-byte boundary, so that every
// capability computes it with whole packets (elementwise.cpp says why).
#pragma once

#ifndef SPMD_CPU_CAP
#error "tensor/cpu/float_blocks.h: compile as one of a capability's kernel files"
#endif

#include <cstdint>

#include "tensor/backend.h"

namespace spmd::cpu::SPMD_CPU_CAP {

constexpr int64_t kBlock = 1024;      // elements of a block, at most
constexpr int64_t kVectorBytes = 64;  // one AVX-512 register, two AVX2 ones
template <class C>
constexpr int64_t kLanes = kVectorBytes / int64_t(sizeof(C));

// m rounded up to whole vectors: the length a block kernel runs on.
template <class C>
int64_t whole_vectors(int64_t m) {
  return (m + kLanes<C> - 1) / kLanes<C> * kLanes<C>;
}

// y = op(x) over n elements (n <= kBlock); C is float or double.
template <class C>
void unary_block(UnaryOp op, const C* px, C* py, int64_t n);
// out = a op b over n elements; for an activation's backward, a = dy and b
// the forward input x (or output y).
template <class C>
void binary_block(BinaryOp op, const C* pa, const C* pb, C* po, int64_t n);

}  // namespace spmd::cpu::SPMD_CPU_CAP
