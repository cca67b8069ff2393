// The shared-memory paths' knobs: the size of a channel's rings, of the
// group segment's slots and posts, where zero copy starts, and how much of
// the peers' memory a group keeps mapped. Read once from the environment by
// the host backend (../host/), beside the TCP side's (../tcp/tuning.h); the
// defaults were chosen on this project's machines (docs/measurements/shm.md).
// Every rank of a group must read the same values: the ranks check that they
// agree on the segment's (../host/transport.h).
#pragma once

#include <cstddef>

namespace spmd::dist::shm {

struct ShmTuning {
  // Each way's ring of a shared-memory channel (shm_channel.h), a power of
  // two: the bytes a sender may be ahead of its receiver.
  size_t ring_bytes = 1 << 20;
  // A group whose ranks all share a host reduces all_reduces above the TCP
  // side's small_all_reduce_bytes in a segment they all map
  // (segment_all_reduce.h), a slot of this many bytes per rank at a time (a
  // multiple of 64); 0 keeps them on the ring.
  size_t slot_bytes = 1 << 20;
  // In such a group, broadcast, all_gather (its output) and reduce_scatter
  // (its input) of at least this many bytes run in the segment too
  // (segment_collectives.h); smaller ones keep the trees and rings.
  size_t segment_min_bytes = 64 << 10;
  // In such a group, all_reduce of at most this many bytes is exchanged
  // through posts in the segment, with no message (segment_small_all_reduce.h);
  // 0: recursive doubling over the rings.
  size_t post_bytes = 4 << 10;
  // In such a group, broadcast, all_gather, reduce_scatter and all_reduce
  // whose buffer the peers read or write has at least this many bytes (the
  // tensor, all_gather's output, reduce_scatter's input) copy straight
  // between the ranks' tensors when they all lie in shareable blocks
  // (zero_copy.h); and from the group's creation on, this process's CPU
  // blocks of at least this many bytes are shareable
  // (tensor/cpu/allocator.h). 0: never. Zero copy beat the staged paths from
  // 64 KiB up (docs/measurements/shm.md); the default is higher because
  // every shareable block holds a file descriptor.
  size_t zero_copy_bytes = 256 << 10;
  // Bounds on the peers' blocks a group keeps mapped for zero copy
  // (peer_memory.h): mappings, and the bytes they map. Small ones make the
  // tests evict.
  size_t max_mappings = 64;
  size_t max_mapped_bytes = size_t(4) << 30;

  // The defaults, overridden by SPMD_SHM_RING_BYTES, SPMD_SHM_SLOT_BYTES,
  // SPMD_SHM_SEGMENT_MIN_BYTES, SPMD_SHM_POST_BYTES, SPMD_SHM_ZERO_COPY_BYTES,
  // SPMD_SHM_MAX_MAPPINGS and SPMD_SHM_MAX_MAPPED_BYTES. Throws
  // InvalidArgument naming the variable for a value out of its range.
  static ShmTuning from_env();
};

}  // namespace spmd::dist::shm
