// Elementwise kernels: fills, casts and copies, unary and binary maps, select.
//
// Operands share one shape (broadcast ones have stride 0) and may have any
// strides and dtypes; the output may be the same memory as an input. Two
// paths: when every operand is contiguous and of one dtype, a vectorised
// kernel moves 16 bytes per access; otherwise a strided kernel works out each
// operand's offset from the shape, after merging the dims that all operands
// lay out contiguously (a broadcast bias add becomes a 2-d problem).
//
// Values are computed as device.cuh's ComputeOf says (f32 for the half
// types, f64 for f64, int64 for integers), the same arithmetic as the CPU's.
#pragma once

#include "kernels/types.h"

namespace spmd::kernels {

// The ops of spmd::UnaryOp and spmd::BinaryOp (tensor/backend.h says what each computes).
enum class UnaryOp : uint8_t {
  kNeg,
  kAbs,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kTanh,
  kSigmoid,
  kRelu,
  kGeluTanh,
  kGeluErf,
  kSilu,
  kSin,
  kCos,
  kSquare,
  kReciprocal,
  kSign,
  kLogicalNot,
};
enum class BinaryOp : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMaximum,
  kMinimum,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kLogicalAnd,
  kLogicalOr,
  kReluBackward,
  kGeluTanhBackward,
  kGeluErfBackward,
  kSiluBackward,
  kSigmoidBackward,
  kTanhBackward,
};

// out = value (converted to out's dtype).
void fill(const TensorArg& out, double value, Stream stream);
// out[i] = start + i * step, computed in f64. REQUIRES: out contiguous.
void arange(const TensorArg& out, double start, double step, Stream stream);
// out = src converted to out's dtype (the cast and the strided copy).
void copy(const TensorArg& src, const TensorArg& out, Stream stream);
void unary(UnaryOp op, const TensorArg& x, const TensorArg& out, Stream stream);
void binary(BinaryOp op, const TensorArg& a, const TensorArg& b, const TensorArg& out,
            Stream stream);
// out = a op s, or s op a when scalar_first.
void binary_scalar(BinaryOp op, const TensorArg& a, double s, bool scalar_first,
                   const TensorArg& out, Stream stream);
// out = cond ? a : b (cond of any dtype, true when nonzero).
void where(const TensorArg& cond, const TensorArg& a, const TensorArg& b, const TensorArg& out,
           Stream stream);
// out = mask ? value : x.
void masked_fill(const TensorArg& x, const TensorArg& mask, double value, const TensorArg& out,
                 Stream stream);
// Keeps element [.., i, j] of the last two dims when j - i <= diagonal (lower)
// or >= diagonal (upper), else writes 0. REQUIRES: ndim >= 2.
void triangle(const TensorArg& x, int64_t diagonal, bool upper, const TensorArg& out,
              Stream stream);

}  // namespace spmd::kernels
