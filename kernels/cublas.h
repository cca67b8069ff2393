// cuBLAS, opened at the first matrix product rather than when a program starts.
//
// Linking libcublas makes the dynamic loader load libcublasLt too, and that
// library's static initializers touch about 150 MB before main() runs: a C
// program that only links the two starts at ~155 MB of resident memory,
// against ~1.3 MB without them (cudart and NCCL add ~3 MB). Every program of
// a CUDA build would pay that, GPU or not: the launcher's workers, CPU
// training, the tests. So kernels/ does not link cuBLAS; it opens the
// library with dlopen when the first GEMM needs it and calls it through the
// function pointers below. Internal to kernels/ (includes cuBLAS's header).
#pragma once

#include <cublas_v2.h>

namespace spmd::kernels {

struct CublasApi {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetWorkspace_v2) set_workspace;
  // cublas_api.h also declares inline overloads of the two GEMMs taking a
  // cudaDataType, so decltype cannot name them.
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                            int m, int n, int k, const void* alpha, const void* A,
                                            cudaDataType a_type, int lda, long long stride_a,
                                            const void* B, cudaDataType b_type, int ldb,
                                            long long stride_b, const void* beta, void* C,
                                            cudaDataType c_type, int ldc, long long stride_c,
                                            int batch_count, cublasComputeType_t compute,
                                            cublasGemmAlgo_t algo);
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType a_type, int lda,
                            const void* B, cudaDataType b_type, int ldb, const void* beta, void* C,
                            cudaDataType c_type, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo);
  decltype(&cublasGetStatusName) status_name;
  decltype(&cublasGetStatusString) status_string;
};

// The cuBLAS entry points, opening the library on the first call (thread-safe).
// Throws spmd::Error naming the files tried when it cannot be opened.
const CublasApi& cublas();

}  // namespace spmd::kernels
