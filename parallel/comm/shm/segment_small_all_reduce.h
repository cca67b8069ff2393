// The small all_reduce of a group whose ranks all share one host: no
// message at all. Each rank writes its tensor into its own post in the
// group's segment (group_segment.h) and stamps it; it waits until every
// peer's post carries the same stamp, checks the peers' headers against its
// own, and reduces the p posts itself, in rank order (so every rank adds in
// the same order and gets the same bits). For 8 bytes a post is one cache
// line: the whole collective is one line written and p - 1 read per rank,
// where recursive doubling over the rings moves a header and the data and
// two counters through each ring at each of its log2 p steps.
//
// Memory ordering (docs/shm.md): a rank writes its header and data, then
// stores its stamp with release; a reader loads the stamp with acquire and
// only then reads the header and data. A post is written again two
// exchanges later (the posts come in two sets, taken in turn: stamp & 1),
// and by then every peer has read it: a rank starts exchange s + 2 only
// after it has seen every peer's post of s + 1, which each peer wrote only
// after it had read every post of s. So no post is ever read while it is
// written, and a stamp, once seen, stays until all have read its post.
//
// Waiting (post_wait.h): a bounded spin on the peers' stamps, then a
// sleep in poll() on every peer's link; a poster wakes sleepers through
// their `asleep` flag, which holds the stamp of the exchange they wait for,
// and a doorbell on the link (the handshake of shm_ring.h: store, full
// fence, load on each side). The link still carries a peer's death (EOF),
// so a dead peer fails the collective as "lost rank q" within the group's
// timeout, as elsewhere.
//
// Chosen for all_reduce of at most post_bytes (SPMD_SHM_POST_BYTES, 4 KiB)
// when the group has posts (run_in_segment.h). Cost
// per rank: n bytes written, (p - 1) n read and reduced, one wait; the
// reads of p - 1 posts go straight to the other cores' caches.
#pragma once

#include <chrono>

#include "parallel/comm/shm/algorithm.h"
#include "parallel/comm/shm/group_segment.h"

namespace spmd::dist::shm {

// Before this rank sleeps in any other collective (Mesh::set_glance): raises
// its `asleep` flag to the stamp of the exchange this rank would do next (so
// that a peer that posts it wakes this rank), then looks at its posts. A peer that posted there
// under the current sequence number runs an all_reduce where this rank runs
// another call: it throws the mismatch (a LinkError), as a link's header
// check would, instead of both waiting for the timeout.
void glance_at_posts(GroupSegment& segment, const Mesh& mesh);

class SegmentSmallAllReduce {
 public:
  // REQUIRES: segment.fits_post(data.bytes()).
  SegmentSmallAllReduce(const Context& ctx, GroupSegment& segment, Span data, ReduceOp op)
      : ctx_(ctx), segment_(segment), data_(data), op_(op) {}
  // post() then finish().
  void run();

  // In two halves, for a caller that posts at once and finishes later (the
  // issuing thread, ../host/start_inline.cpp): post() writes this rank's part;
  // all_posted() looks `hot_polls` times (poll_hot), then spins until
  // `give_up` (yielding the core each idle round when `yield`, never
  // sleeping) and says whether every peer's part has come; finish() waits
  // for them (PostWait, post_wait.h), checks their headers and reduces.
  void post();
  bool all_posted(std::chrono::steady_clock::time_point give_up, bool yield, int hot_polls) const;
  void finish();

 private:
  bool posted(int peer) const;
  void wake_sleepers();
  void check_headers() const;

  Context ctx_;
  GroupSegment& segment_;
  Span data_;
  ReduceOp op_;
  uint64_t stamp_ = 0;  // this exchange's (GroupSegment::next_stamp)
  int set_ = 0;         // the post set it uses: stamp_ & 1
};

}  // namespace spmd::dist::shm
