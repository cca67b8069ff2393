// The vocabulary of kernels/: element types, strided operands, streams and
// scratch memory, as plain structs that a host compiler reads without any CUDA
// header. tensor/cuda/ turns Tensors into these (tensor/cuda/context.h) and
// calls the launch functions declared beside this file; kernels/ knows nothing
// of Tensor, Storage or the allocator.
//
// Every launch function queues work on the stream it is given and returns at
// once; it throws spmd::Error (with the CUDA error text) when the launch fails.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;  // cudaStream_t is CUstream_st*: no CUDA header needed to name one

namespace spmd::kernels {

using Stream = CUstream_st*;

// The element types, in the order of spmd::DType (tensor/cuda maps one to the other).
enum class ScalarType : uint8_t { kF32, kF64, kBF16, kF16, kI32, kI64, kU8, kBool };

size_t scalar_size(ScalarType t);
const char* scalar_name(ScalarType t);
inline bool is_floating(ScalarType t) {
  return t == ScalarType::kF32 || t == ScalarType::kF64 || t == ScalarType::kBF16 ||
         t == ScalarType::kF16;
}

constexpr int kMaxDims = 8;

// A strided tensor on the device: element (i0, ..., i[ndim-1]) lives at
// data + sum(i[k] * strides[k]) elements. A 0-d tensor has ndim 0 and one element.
struct TensorArg {
  void* data = nullptr;
  ScalarType dtype = ScalarType::kF32;
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= sizes[i];
    return n;
  }
  bool is_contiguous() const {
    int64_t expected = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      if (sizes[i] != 1 && strides[i] != expected) return false;
      expected *= sizes[i];
    }
    return true;
  }
};

// A contiguous device buffer and its element type; data may be null where an
// argument is optional (a layer norm without bias).
struct Buffer {
  void* data = nullptr;
  ScalarType dtype = ScalarType::kF32;
};

// Temporary device memory for the launches of one call (partial sums of a
// reduction split across blocks, a flag...). The caller's allocator hands it
// out and takes it back when the Scratch dies; since the allocator is ordered
// by stream, that may happen as soon as the launches are queued.
class Scratch {
 public:
  virtual ~Scratch() = default;
  virtual void* allocate(size_t nbytes) = 0;
};

// The number of multiprocessors of the current device (cached per device).
int multiprocessor_count();

}  // namespace spmd::kernels
