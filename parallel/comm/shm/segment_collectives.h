// Broadcast, all_gather and reduce_scatter in a group's shared segment
// (group_segment.h), for a group whose ranks all share one host, beside the
// all_reduce of segment_all_reduce.h. Over the rings (shm_channel.h) a byte
// is copied into a ring by its sender and out of it by its receiver, and
// every chunk waits for room and for a wake-up; here each rank copies its
// part into its own slot, one barrier (segment_barrier) says every slot is
// written, and each rank reads what it needs straight out of the others'
// slots: into its output (broadcast, all_gather), or through the reduction
// (reduce_scatter, which so never stages a received chunk).
//
// Each chunk takes the segment's next set of slots (next_set(): 0, 1, 0, ...),
// so a rank writes chunk k + 1 while the others still read chunk k: a set is
// written again only after the barrier of the chunk between, which no rank
// passes before it has finished reading that set. Every collective runs at
// least one barrier, even with nothing to move, so its header is checked.
//
// Per chunk (p ranks, rank r, set s):
//   broadcast       root copies up to a slot of the tensor into slot (s, root);
//                   barrier; every other rank copies it out.
//   all_gather      rank r copies up to a slot of its input into slot (s, r),
//                   and into its own output block when not in place;
//                   barrier; rank r copies slot (s, k) into output block k,
//                   for every k != r.
//   reduce_scatter  rank r copies the same piece of each block k != r of its
//                   input into slot (s, r), back to back; barrier; rank r
//                   reduces its own block's piece with the piece of block r
//                   in every other slot, straight into its output.
// Per rank that is n copied in and (p-1) n out for all_gather (a ring over
// the rings: (p-1) n in and (p-1) n out), (p-1)/p N in and (p-1)/p N reduced
// for reduce_scatter of an N-element input (a ring: also (p-1)/p N copied
// out into staging), and n by every rank for broadcast, with one barrier per
// chunk instead of a wait for every ring's worth.
//
// Which collective runs here is run_in_segment's choice (run_in_segment.h).
// Not here: all_to_all, gather, scatter and reduce, which stay on the links.
#pragma once

#include "parallel/comm/shm/algorithm.h"
#include "parallel/comm/shm/group_segment.h"
#include "parallel/comm/shm/segment_all_reduce.h"

namespace spmd::dist::shm {

class SegmentBroadcast {
 public:
  SegmentBroadcast(const Context& ctx, GroupSegment& segment, Span data, int root)
      : ctx_(ctx), segment_(segment), data_(data), root_(root) {}
  void run();

 private:
  Context ctx_;
  GroupSegment& segment_;
  Span data_;
  int root_;
};

class SegmentAllGather {
 public:
  // output: p blocks of input.count elements; input is block rank() (in
  // place) or apart from the output, and is copied into its block piece by
  // piece, each right after the piece went into the slot (read once from
  // memory, the second time from cache).
  SegmentAllGather(const Context& ctx, GroupSegment& segment, Span output, Span input)
      : ctx_(ctx), segment_(segment), output_(output), input_(input) {}
  void run();

 private:
  Context ctx_;
  GroupSegment& segment_;
  Span output_, input_;
};

class SegmentReduceScatter {
 public:
  // REQUIRES: input.count == p * output.count; segment.slot_bytes() holds
  // at least one element of each of p - 1 blocks.
  SegmentReduceScatter(const Context& ctx, GroupSegment& segment, Span input, Span output,
                       ReduceOp op)
      : ctx_(ctx), segment_(segment), input_(input), output_(output), op_(op) {}
  void run();

 private:
  Context ctx_;
  GroupSegment& segment_;
  Span input_, output_;
  ReduceOp op_;
};

}  // namespace spmd::dist::shm
