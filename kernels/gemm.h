// Matrix products through cuBLAS: out = alpha a @ b + beta out over any number
// of batch dims, with transposed operands passed to cuBLAS as transposed
// (op T) rather than copied.
//
// cuBLAS is column-major; a row-major product C = A B is the column-major
// product C^T = B^T A^T, and a row-major matrix read as column-major is its
// transpose. So each operand only needs a unit stride in one of its two
// matrix dims, and the batch dims become one strided-batched call (several
// when they do not merge into one stride).
//
// Types: f32 (f32 accumulation, or TF32 tensor cores when allow_tf32), f64,
// and bf16 and f16 with f32 accumulation, writing bf16/f16 or f32 (the
// mixed-precision case: bf16 operands, an f32 result).
#pragma once

#include "kernels/types.h"

namespace spmd::kernels {

// True when a matrix of this size and strides can go to cuBLAS as it is (a
// unit stride on one side, a leading dimension no smaller than the other side).
bool gemm_layout_ok(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride);

// a (..., M, K), b (..., K, N), out (..., M, N), all with the same ndim >= 2
// and batch sizes (a and b may have stride 0 there). REQUIRES: the last two
// dims of each satisfy gemm_layout_ok; a and b of one dtype.
void gemm(const TensorArg& a, const TensorArg& b, const TensorArg& out, double alpha, double beta,
          bool allow_tf32, Stream stream);

}  // namespace spmd::kernels
