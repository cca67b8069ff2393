// Matrix products, through the device's GEMM (Eigen with OpenBLAS underneath
// on the CPU, cuBLAS on the GPU). Transposed views go to the GEMM as
// transposed operands: no copy.
#pragma once

#include "tensor/tensor.h"

namespace spmd::ops {

// PyTorch's matmul for operands of 2 or more dims: (..., M, K) @ (..., K, N)
// -> (..., M, N), the leading dims broadcast. 1-D operands are treated as a
// row (left) or a column (right) vector and that dim is dropped from the result.
Tensor matmul(const Tensor& a, const Tensor& b);
// out = alpha * a @ b + beta * out, into an existing tensor of the result's
// shape (beta = 1 accumulates, as gradient accumulation wants). out has the
// operands' dtype, or f32 for bf16/f16 operands (mixed precision: products
// accumulated in f32 and written without rounding to 16 bits).
void matmul_out(const Tensor& out, const Tensor& a, const Tensor& b, double alpha = 1,
                double beta = 0);
// x @ weight^T + bias, PyTorch's F.linear: x (..., in), weight (out, in), bias (out).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

}  // namespace spmd::ops
