// What every kernel file shares on the host side: element sizes and names,
// the multiprocessor count, and turning CUDA and cuBLAS status codes into
// spmd::Error messages.
#include <atomic>
#include <cstring>

#include "kernels/cublas.h"
#include "kernels/cuda_check.h"
#include "kernels/types.h"

namespace spmd::kernels {

size_t scalar_size(ScalarType t) {
  switch (t) {
    case ScalarType::kF64:
    case ScalarType::kI64:
      return 8;
    case ScalarType::kF32:
    case ScalarType::kI32:
      return 4;
    case ScalarType::kBF16:
    case ScalarType::kF16:
      return 2;
    case ScalarType::kU8:
    case ScalarType::kBool:
      return 1;
  }
  return 0;
}

const char* scalar_name(ScalarType t) {
  switch (t) {
    case ScalarType::kF32:
      return "f32";
    case ScalarType::kF64:
      return "f64";
    case ScalarType::kBF16:
      return "bf16";
    case ScalarType::kF16:
      return "f16";
    case ScalarType::kI32:
      return "i32";
    case ScalarType::kI64:
      return "i64";
    case ScalarType::kU8:
      return "u8";
    case ScalarType::kBool:
      return "bool";
  }
  return "?";
}

int multiprocessor_count() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];  // 0 = not asked yet
  int device = 0;
  SPMD_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) device = 0;
  int count = cache[device].load(std::memory_order_relaxed);
  if (count == 0) {
    SPMD_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    cache[device].store(count, std::memory_order_relaxed);
  }
  return count;
}

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  if (err == cudaErrorMemoryAllocation) {
    SPMD_THROW(OutOfMemoryError, "CUDA error in ", call, " (", base ? base + 1 : file, ":", line,
               "): ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
  }
  SPMD_THROW(Error, "CUDA error in ", call, " (", base ? base + 1 : file, ":", line,
             "): ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
}

void throw_cublas_error(int status, const char* call, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  const auto s = static_cast<cublasStatus_t>(status);
  const CublasApi& api = cublas();  // loaded: the failing call came from it
  SPMD_THROW(Error, "cuBLAS error in ", call, " (", base ? base + 1 : file, ":", line,
             "): ", api.status_name(s), ": ", api.status_string(s));
}

}  // namespace spmd::kernels
