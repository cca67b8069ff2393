// Reductions over any set of dims of a strided tensor, and argmax/argmin.
//
// A reduction is an (M outputs) x (R reduced elements) problem once the kept
// and the reduced dims are each merged. When the reduced elements of one
// output lie next to each other in memory (a sum over the last dim), threads
// of a warp or block share an output ("rows"); otherwise each thread owns an
// output and threads of a warp read neighbouring outputs ("columns", a sum
// over the batch dim). When there are too few outputs to fill the GPU, R is
// split across blocks that write partial results, and a second pass combines
// them: a full sum of a large tensor runs at memory bandwidth, not on one block.
// Accumulation is in f32 for f32 and the half types, f64 for f64, int64 for
// integers; max and min propagate NaN.
#pragma once

#include "kernels/types.h"

namespace spmd::kernels {

enum class ReduceOp : uint8_t { kSum, kMean, kMax, kMin, kProd };

// out has x's ndim with size 1 on every reduced dim (keepdim form) and any
// dtype (the result is converted to it).
void reduce(ReduceOp op, const TensorArg& x, const TensorArg& out, Scratch& scratch, Stream stream);
// out (i64, x's ndim with size 1 on `dim`) = the index of the largest
// (smallest) element along dim, the first one on ties; NaN counts as largest
// and as smallest.
void arg_reduce(bool is_max, const TensorArg& x, int dim, const TensorArg& out, Stream stream);

}  // namespace spmd::kernels
