// The CPU backend's allocator: 64-byte-aligned host blocks, with a cache of
// large ones.
//
// A training step allocates the same large activations every step. Fresh
// large blocks come from the kernel as untouched pages, and the first write
// to each 4 KiB page faults and zeroes it: writing a new 64 MiB output costs
// ~8x what writing a reused one does (glibc returns blocks above 32 MiB to the
// kernel on free). So freed blocks of at least kMinCached bytes are kept, by
// size class, up to a cap, and handed out again for the same size class: the
// host version of the CUDA caching allocator. Blocks of 4 MiB or more are also
// 2 MiB aligned and advised to use transparent huge pages (fewer faults, fewer
// TLB misses). Smaller blocks go straight to malloc.
//
// The threshold is 128 KiB, glibc's own mmap threshold, rather than larger,
// because of what glibc does with the blocks in between: the first free of
// an mmapped block raises glibc's threshold to that block's size, so from
// then on blocks up to it are carved from the heap, where a training step's
// order of frees leaves holes that count in the resident set. With a 1 MiB
// threshold the tiny GPT-2 step's 512 KiB activations took that path, and
// its peak RSS held ~10 MB (75 MB, 49 MB of it tensors) that no tensor used;
// cached from 128 KiB it is 65 MB (bench/train_bench.cpp's peak_alloc_mb
// and peak_rss_mb, docs/cpu.md).
//
// Thread-safe. The cap is SPMD_CPU_CACHE_MB (default 2048); 0 disables caching.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor/storage.h"

namespace spmd::cpu {

struct HostMemoryStats {
  size_t allocated = 0;       // bytes in live blocks handed out by allocate()
  size_t cached = 0;          // bytes held in the cache, free for reuse
  size_t peak_allocated = 0;  // the most `allocated` has been (since reset_host_peak_memory)
};

// A block of at least nbytes (never a null pointer, even for 0 bytes).
// Throws OutOfMemoryError when the system has no more.
DataPtr allocate_host(size_t nbytes);
// Returns every cached block to the system.
void empty_host_cache();
HostMemoryStats host_memory_stats();
// Starts the peak over from what is allocated now (as
// torch.cuda.reset_peak_memory_stats), to measure one phase of a program.
void reset_host_peak_memory();

}  // namespace spmd::cpu
