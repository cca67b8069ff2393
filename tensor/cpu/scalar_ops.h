// The scalar path of the CPU's elementwise ops: integer arithmetic,
// comparisons and logical ops of any dtype (the floating arithmetic runs
// Eigen block kernels in elementwise.cpp). Internal to tensor/cpu/.
#pragma once

#include "tensor/backend.h"
#include "tensor/cpu/loops.h"

namespace spmd::cpu {

// out = a op b over a loop of (out, a, b); a and b are of `dtype`, out of
// `dtype` or bool (comparisons, logical ops). Throws for ops the scalar
// path does not define for `dtype` (say, division of integers).
void scalar_binary(BinaryOp op, const StridedLoop<3>& loop, DType dtype);
// out = op(x) over a loop of (out, x): logical_not (bool out) for any dtype,
// and neg, abs, square, sign, relu of integers.
void scalar_unary(UnaryOp op, const StridedLoop<2>& loop, DType dtype);
// loop2 (out, a) with a third operand reading *value everywhere (stride 0),
// placed first (s op a) or second (a op s).
StridedLoop<3> with_constant(const StridedLoop<2>& loop2, const void* value, bool scalar_first);

}  // namespace spmd::cpu
