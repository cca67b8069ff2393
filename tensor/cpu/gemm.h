// One matrix product on raw row-major pointers, for CPU kernels that run
// products inside their own loops (the fused attention): C = alpha op(A)
// op(B) + beta C with op(X) = X or X^T, A (M, K) after op, B (K, N) after
// op, each with its row stride (lda, ldb, ldc: elements between rows as
// stored). Goes to the same GEMM as CpuBackend::matmul (matmul.cpp); called
// inside an OpenMP parallel region it runs on the calling thread alone.
#pragma once

#include <cstdint>

namespace spmd::cpu {

template <class T>
void gemm_rows(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
               int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

}  // namespace spmd::cpu
