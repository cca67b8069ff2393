// Shared-segment all_reduce: for a group whose ranks all share one host
// (group_segment.h), the reduction happens in shared memory instead of
// being passed around a ring. The chunk (one slot's worth of the tensor,
// SPMD_SHM_SLOT_BYTES) is cut into p parts, and rank r reduces part r:
//
//   1. every rank r copies into its own slot the parts k != r of its chunk
//      (each at its place in the slot), the parts the others reduce;
//   2. barrier: every slot is filled;
//   3. rank r reduces part r in its own tensor, with part r of every other
//      slot, and copies the result into part r of its slot;
//   4. barrier: every part is reduced;
//   5. every rank copies the parts k != r out of slot k into its tensor.
//
// A reduce-scatter then an all-gather through the slots, without a staging
// copy: a rank's own part never leaves its tensor before it is reduced.
// Chunks use the segment's two sets of slots in turn, so the copy-in of
// chunk k + 1 does not wait for the others' copy-out of chunk k: a rank
// writes set s again only after the first barrier of the chunk between,
// which no rank passes before finishing its copy-out of set s.
//
// The barriers (segment_barrier) are post exchanges in the segment, or
// messages over the links when the group has no posts; either way the first
// checks each collective's header (the check that every rank runs the same
// call), and a dead peer fails the collective as it would any other.
//
// The other collectives that run in the segment: segment_collectives.h.
//
// Cost per rank (n bytes, p ranks): (p-1)/p n copied in, n/p reduced from
// each of p slots and copied into the slot, (p-1)/p n copied out: about
// 2 n copied and n/p reduced, and two barriers per chunk; a ring moves
// 2 (p-1)/p n bytes each way through rings that copy each byte twice.
#pragma once

#include "parallel/comm/shm/algorithm.h"
#include "parallel/comm/shm/group_segment.h"

namespace spmd::dist::shm {

// The step between a segment algorithm's writes and the reads of them. When
// the group has posts, an exchange of posts with no data
// (segment_small_all_reduce.h): each rank stamps its post with release and
// waits for every peer's stamp with acquire, which orders every slot write
// before it ahead of every read after it on the other ranks; each post
// carries the collective's header, checked by every reader; a dead peer is
// seen on its link. Else a dissemination barrier (barrier.h) of one-byte
// messages over the links, whose rings' release and acquire order the slots
// the same way; the links carry each collective's header once (with the
// first byte), so the first barrier checks the call, and a dead peer fails
// it as any other message.
void segment_barrier(const Context& ctx, GroupSegment& segment);

class SegmentAllReduce {
 public:
  SegmentAllReduce(const Context& ctx, GroupSegment& segment, Span data, ReduceOp op)
      : ctx_(ctx), segment_(segment), data_(data), op_(op) {}
  void run();

 private:
  Context ctx_;
  GroupSegment& segment_;
  Span data_;
  ReduceOp op_;
};

}  // namespace spmd::dist::shm
