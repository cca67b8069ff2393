// The CPU backend's allocator: 64-byte-aligned host blocks, with a cache of
// large ones.
//
// A training step allocates the same large activations every step. Fresh
// large blocks come from the kernel as untouched pages, and the first write
// to each 4 KiB page faults and zeroes it: writing a new 64 MiB output costs
// ~8x what writing a reused one does (glibc returns blocks above 32 MiB to the
// kernel on free). So freed blocks of at least kMinCached bytes are kept, by
// size class, up to a cap, and handed out again for the same size class: the
// host version of the CUDA caching allocator. Smaller blocks go straight to
// malloc.
//
// Transparent huge pages are not asked for unless SPMD_HUGE_PAGES=1, which
// aligns blocks of 4 MiB or more to 2 MiB and advises them (MADV_HUGEPAGE).
// Cached blocks fault once, so huge pages would save only TLB misses; on the
// 2-vCPU virtual machine of docs/cpu.md ("Huge pages") the advised blocks
// made a one-thread training step of the small config 1.35x slower, its
// AdamW pass 19x, and gained nothing at two threads. PyTorch's CPU
// allocator does not advise them either.
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
// Shareable blocks: once share_host_blocks_from(min) was called, blocks of at
// least `min` bytes are memory files another process can map
// (shareable_blocks.h), cached apart from the others; the communicator turns
// this on for a group whose ranks share a host, so its collectives can copy
// straight between the ranks' tensors. They never get huge pages, even with
// SPMD_HUGE_PAGES=1 (shared memory's transparent huge pages are off by default,
// /sys/kernel/mm/transparent_hugepage/shmem_enabled). When the system refuses
// one (no file descriptor left), the block is an ordinary one.
//
// Thread-safe. The cap is SPMD_CPU_CACHE_MB (default 2048); 0 disables caching.
// Both variables are read at the first allocation; a value that is not a
// whole number in range (0 or 1 for SPMD_HUGE_PAGES) throws there.
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

// Where a pointer lies in a shareable block.
struct ShareableBlock {
  int fd = -1;          // the block's memory file, in this process
  uint64_t serial = 0;  // unique within this process: fd numbers are reused
  size_t offset = 0;    // of the pointer from the block's start
  size_t bytes = 0;     // the whole block
};
// From now on, blocks of at least min_bytes are shareable (the smallest
// threshold asked for wins; 0 asks nothing). Blocks allocated before stay as
// they are; the cache gives back its ordinary blocks of those sizes, which
// would never be handed out again.
void share_host_blocks_from(size_t min_bytes);
// The shareable block that `p` points into (anywhere inside it: tensors are
// views at offsets), or false when it lies in none.
bool find_shareable_block(const void* p, ShareableBlock* block);

}  // namespace spmd::cpu
