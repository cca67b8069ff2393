// The caching allocator of CUDA memory (as PyTorch's CUDACachingAllocator,
// simplified: no splitting of blocks).
//
// Sizes are rounded up to a size class: multiples of 512 bytes up to 1 MiB,
// then eighths of each power of two (at most 12.5% rounding waste). A freed
// block goes to the free list of its (device, stream, size class) and the
// next request of that class on that stream takes it back without a
// cudaMalloc and without waiting: work on one stream runs in order, so the
// new owner's kernels cannot start before the old owner's have finished. A
// block used on other streams (record_stream) is parked with an event per
// such stream at free time and joins its free list once all have completed.
// The block holds a copy of each such Stream until then, so the stream is
// alive when the event is recorded on it (a Stream's last copy destroys it).
// When cudaMalloc fails, the device's cached blocks are released and the
// allocation retried once; if it fails again, an OutOfMemoryError says how
// much was asked, allocated and reserved.
//
// Thread-safety: every method may be called from any thread (one mutex).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "tensor/cuda_api.h"
#include "tensor/storage.h"

namespace spmd::cuda::detail {

struct MemoryStats {
  size_t allocated = 0;  // bytes in blocks held by live tensors (rounded sizes)
  size_t peak_allocated = 0;
  size_t reserved = 0;     // bytes obtained from cudaMalloc: live + cached
  size_t num_mallocs = 0;  // cudaMalloc calls so far (a test counts these)
};

class CachingAllocator {
 public:
  // The process-wide allocator. Never destroyed: tensors freed during exit
  // must still find it.
  static CachingAllocator& instance();

  // A block of at least nbytes on `device`, owned by `stream`; nbytes == 0
  // gives a null pointer.
  DataPtr allocate(size_t nbytes, int device, cudaStream_t stream);
  // Marks the block that starts at `ptr` as used by work on `stream`, and
  // keeps `stream` alive until the block is freed.
  void record_stream(const void* ptr, const Stream& stream);

  MemoryStats stats(int device);
  void reset_peak(int device);
  // Frees every cached block (on every device) back to CUDA.
  void empty_cache();

  // The size class a request of n bytes is served from.
  static size_t round_size(size_t n);

  struct Block;

 private:
  CachingAllocator() = default;
  void free(Block* block) noexcept;
  struct State;
  State& state();
};

}  // namespace spmd::cuda::detail
