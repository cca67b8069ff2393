// Checking CUDA and cuBLAS calls. Every call into the CUDA runtime or cuBLAS
// goes through one of these macros, so a failure becomes a spmd::Error that
// names the call, where it was made, and the library's own error text.
// Unlike the other headers of kernels/, this one includes the CUDA runtime's
// header: only CUDA builds' sources (kernels/, tensor/cuda/) include it.
#pragma once

#include <cuda_runtime_api.h>

#include "runtime/error.h"

namespace spmd::kernels {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* call, const char* file, int line);

}  // namespace spmd::kernels

// SPMD_CUDA_CHECK(cudaMalloc(&p, n)) throws "CUDA error in cudaMalloc(&p, n)
// (allocator.cpp:42): cudaErrorMemoryAllocation: out of memory".
#define SPMD_CUDA_CHECK(call)                                                  \
  do {                                                                         \
    const cudaError_t spmd_err_ = (call);                                      \
    if (spmd_err_ != cudaSuccess)                                              \
      ::spmd::kernels::throw_cuda_error(spmd_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: reports a bad configuration (grid too large, too much
// shared memory) at the launch rather than at some later call.
#define SPMD_CUDA_CHECK_LAUNCH() SPMD_CUDA_CHECK(cudaGetLastError())

#define SPMD_CUBLAS_CHECK(call)                                                     \
  do {                                                                              \
    const int spmd_status_ = static_cast<int>(call);                                \
    if (spmd_status_ != 0)                                                          \
      ::spmd::kernels::throw_cublas_error(spmd_status_, #call, __FILE__, __LINE__); \
  } while (0)
