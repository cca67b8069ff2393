// The host backend's one door into shared memory: whether a collective of a
// group whose ranks all share one host runs in shared memory, and how. The
// choice, in order, for a collective whose buffer holds n bytes:
//
//   1. an all_reduce that fits a post (n <= SPMD_SHM_POST_BYTES): the posts
//      of the group segment, with no message at all
//      (segment_small_all_reduce.h);
//   2. broadcast, all_gather, reduce_scatter or all_reduce whose shared
//      buffer (the tensor, all_gather's output, reduce_scatter's input)
//      lies, on every rank, in a shareable block of at least
//      SPMD_SHM_ZERO_COPY_BYTES: zero copy, each byte copied once between
//      the ranks' own tensors (zero_copy.h);
//   3. the slots of the group segment, every rank copying in and reading its
//      peers' slots (segment_all_reduce.h above the small all_reduce's
//      bound, segment_collectives.h from SPMD_SHM_SEGMENT_MIN_BYTES;
//      broadcast only on 3 ranks or more);
//   4. none: the caller runs the TCP algorithms (tcp/), which between ranks
//      of one host go through the shared-memory rings of shm_channel.h.
//
// Every rank decides alike: the same call, sizes and settings give the same
// answer, and where a rank's memory decides (2), the ranks agree through the
// segment before any of them moves a byte.
#pragma once

#include "parallel/comm/shm/algorithm.h"
#include "parallel/comm/shm/group_segment.h"

namespace spmd::dist::shm {

// Runs the collective in shared memory as above; returns whether it did.
// `whole` is the in-place buffer or the output, `in` the input (all_gather,
// reduce_scatter).
bool run_in_segment(const Context& ctx, GroupSegment& segment, OpType type, Span whole, Span in,
                    int root, ReduceOp op);

}  // namespace spmd::dist::shm
