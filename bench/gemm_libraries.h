// The f32 GEMMs of three BLAS-like libraries, side by side for
// spmd-bench-ops: OpenBLAS (what spmd's products run on, tensor/cpu/blas.h),
// BLIS (Debian's OpenMP build, libblis4-openmp) and oneDNN (libdnnl2). BLIS
// and oneDNN are opened at run time (dlopen), so the benchmark builds and
// runs where either is missing, and BLIS, which exports the same BLAS and
// CBLAS names as OpenBLAS, is opened with RTLD_DEEPBIND and called through
// its own API (bli_sgemm), so neither library's calls can land in the
// other's code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spmd::bench {

// C (M, N) = op(A) op(B), row-major, op(X) = X^T when trans_X; lda, ldb, ldc
// are the row strides of A, B and C as stored.
struct GemmLibrary {
  std::string name;     // "openblas", "blis", "onednn"
  std::string version;  // as the library reports it, or why it is missing
  bool available = false;
  void (*sgemm)(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) = nullptr;
  // Sets the library's thread count (each keeps its own).
  void (*set_threads)(int n) = nullptr;
};

// OpenBLAS (when spmd links it), BLIS, oneDNN, in that order; the ones not
// found are listed with available == false and the reason in `version`.
const std::vector<GemmLibrary>& gemm_libraries();

}  // namespace spmd::bench
