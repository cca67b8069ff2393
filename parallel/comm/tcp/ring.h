// Ring algorithms: the bandwidth-optimal all_reduce, reduce_scatter and
// all_gather for large messages.
//
// The p ranks sit on a ring; each sends only to its right neighbour (r+1)
// and receives only from its left (r-1). The buffer is cut into p segments.
//
//   reduce-scatter: in step s (0..p-2) rank r sends segment r-s-1 and
//     receives segment r-s-2, which it combines with its own copy. After p-1
//     steps every segment has passed through every rank once, and rank r holds
//     segment r fully reduced.
//   all-gather: in step s rank r sends segment r-s (starting with the one it
//     owns) and receives segment r-s-1, which is final, straight into place.
//   all_reduce = reduce-scatter then all-gather.
//
// In α-β terms (α the latency of a message, β the time per byte on a link, γ
// the time per byte reduced, n the bytes of the buffer):
//   reduce-scatter, all-gather: (p-1)α + (p-1)/p · nβ (+ (p-1)/p · nγ)
//   all_reduce:                2(p-1)α + 2(p-1)/p · nβ + (p-1)/p · nγ
// Each link carries 2(p-1)/p · n bytes whatever p is: no rank or link is a
// bottleneck, which is why nccl-tests calls n · 2(p-1)/p / time the "bus
// bandwidth". The price is 2(p-1) latencies, so small messages go elsewhere
// (recursive_doubling.h).
//
// Pipelining. Each segment is cut into C chunks, and the steps are unrolled
// into one stream of chunks j = step·C + k. Because rank r receives in step s
// exactly what it sends in step s+1, sending chunk j+C only depends on having
// received (and reduced) chunk j: run() waits for chunk j, reduces it while
// the next chunks are already in flight, and queues chunk j+C at once. The
// reduction overlaps the transfer, and the all-gather starts on the first
// reduced chunk rather than after the whole reduce-scatter.
//
// A ring of some of the group. The group's ring is every rank in rank order,
// its segments the buffer cut into p near-equal parts. A RingLayout names
// other members (the ranks of one host, or one rank per host:
// hierarchical.h) and puts each member's segment anywhere in the buffer.
// Such a ring can also be driven a step at a time (start(), advance()), so
// that rings on different links run at once.
#pragma once

#include <vector>

#include "parallel/comm/tcp/algorithm.h"

namespace spmd::dist::tcp {

// Who stands on a ring and where their segments lie.
struct RingLayout {
  std::vector<int> members;  // group ranks in ring order; this rank is one of them
  // [i]: member i's segment is elements [begin[i], begin[i] + count[i]) of
  // the ring's buffers.
  std::vector<size_t> begin, count;

  // The whole group in rank order, n elements cut into p near-equal parts.
  static RingLayout whole_group(int p, size_t n);
  // `members`, n elements cut into as many near-equal parts, in their order.
  static RingLayout even(std::vector<int> members, size_t n);
};

class Ring {
 public:
  // all_reduce of `data` in place.
  static Ring all_reduce(const Context& ctx, Span data, ReduceOp op);
  // reduce_scatter: `input` holds p·m elements, rank r's `output` (m) gets
  // segment r of the reduction. input is not modified.
  static Ring reduce_scatter(const Context& ctx, Span input, Span output, ReduceOp op);
  // all_gather in place: `data` holds p·m elements, segment r already
  // filled with this rank's contribution.
  static Ring all_gather(const Context& ctx, Span data);

  // The same three on the ring `layout` (the segments' offsets count from
  // each buffer's start). all_reduce and all_gather are in place in `data`.
  // An average divides by `divisor` (the ranks it averages over, which may
  // be more than the ring's). reduce_scatter combines `input` into `work`
  // (which may be input's memory, or other memory indexed alike) and leaves
  // this rank's segment in `own_output` when given, else in `work`.
  static Ring all_reduce(const Context& ctx, RingLayout layout, Span data, ReduceOp op,
                         int divisor);
  static Ring reduce_scatter(const Context& ctx, RingLayout layout, Span input, char* work,
                             char* own_output, ReduceOp op, int divisor);
  static Ring all_gather(const Context& ctx, RingLayout layout, Span data);

  // The whole ring: start, wait for and advance every chunk, then wait until
  // every send has left.
  void run();
  // A step at a time: start() queues the first sends and receives;
  // advance() reduces and forwards every chunk that has arrived, without
  // waiting, and returns whether all have. Sends may still be in flight.
  void start();
  bool advance();
  // The link this ring receives from.
  Link& left() const { return *left_; }

 private:
  Ring(const Context& ctx, RingLayout layout, Span input, Span work, ReduceOp op, int rs_steps,
       int ag_steps, int divisor);
  // The segment sent in flat step t (the one received in step t is t+1's).
  int send_segment(int t) const { return mod(first_send_ - t, p_); }
  int recv_segment(int t) const { return mod(first_send_ - t - 1, p_); }
  // Element range of chunk k of segment s.
  size_t chunk_begin(int s, size_t k) const;
  size_t chunk_size(int s, size_t k) const;
  // Where segment s's partial or final values live.
  char* work_at(int s, size_t k) const;
  void post_send(size_t j);
  void post_recv(size_t j);
  void reduce_chunk(size_t j);

  Context ctx_;
  RingLayout layout_;
  Span input_;        // each rank's own contribution
  Span work_;         // where reduced / gathered values go (may be input_)
  char* own_output_;  // reduce_scatter: segment me_ goes here instead of work_
  ReduceOp op_;
  int p_, me_;  // members, and this rank's place among them
  int rs_steps_, ag_steps_;
  int divisor_;      // an average divides by it
  int first_send_;   // the segment sent in step 0
  size_t chunks_;    // C: chunks per segment
  size_t total_;     // J: chunks the whole run moves
  size_t next_ = 0;  // the next chunk to arrive
  char* staging_ = nullptr;
  size_t slot_bytes_ = 0;
  Link* left_ = nullptr;
  Link* right_ = nullptr;
  std::vector<Link::Ticket> recv_tickets_;
};

}  // namespace spmd::dist::tcp
