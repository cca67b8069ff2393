// Shared-segment all_reduce: for a group whose ranks all share one host
// (group_segment.h), the reduction happens in shared memory instead of
// being passed around a ring. For each chunk of the tensor (one slot's
// worth, SPMD_SHM_SLOT_BYTES):
//
//   1. every rank copies its chunk into its own slot;
//   2. barrier: every slot is filled;
//   3. rank r reduces part r of the chunk (1/p of it) across all p slots,
//      in place in its own slot;
//   4. barrier: every part is reduced;
//   5. every rank copies the p reduced parts out of their slots into its
//      tensor.
//
// Chunks use the segment's two sets of slots in turn, so the copy-in of chunk
// k + 1 does not wait for the others' copy-out of chunk k: a rank writes set s
// again only after the first barrier of the chunk between, which no rank
// passes before finishing its copy-out of set s.
//
// The barriers are dissemination barriers of one-byte messages over the
// links (shared-memory rings), so the first also carries each collective's
// header (the check that every rank runs the same call), and a dead peer
// fails the collective as it would any other. Their release and acquire
// (shm_ring.h) order the slots' writes before the reads that follow.
//
// The other collectives that run in the segment: segment_collectives.h.
//
// Cost per rank: about 3 n bytes copied and n reduced (copy in, reduce 1/p
// of n across p slots, copy out), and 2 ⌈log2 p⌉ α per chunk; a ring moves
// 2 (p-1)/p n bytes each way through rings that copy each byte twice.
#pragma once

#include "parallel/comm/tcp/algorithm.h"
#include "parallel/comm/tcp/group_segment.h"

namespace spmd::dist::tcp {

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

}  // namespace spmd::dist::tcp
