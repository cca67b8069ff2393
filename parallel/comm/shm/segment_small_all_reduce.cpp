// The small all_reduce through the group segment's posts (see the header).
#include "parallel/comm/shm/segment_small_all_reduce.h"

#include <sched.h>

#include <cstring>

#include "parallel/comm/shm/post_wait.h"
#include "parallel/comm/tcp/link.h"
#include "parallel/comm/tcp/reduce.h"

namespace spmd::dist::shm {

void SegmentSmallAllReduce::run() {
  post();
  finish();
}

void SegmentSmallAllReduce::post() {
  stamp_ = segment_.next_stamp();
  set_ = int(stamp_ & 1);
  Post& mine = segment_.post(set_, ctx_.rank());
  mine.header = ctx_.mesh.header();
  if (data_.bytes() > 0) std::memcpy(mine.data(), data_.data, data_.bytes());
  mine.stamp.store(stamp_, std::memory_order_release);
  wake_sleepers();
}

bool SegmentSmallAllReduce::posted(int peer) const {
  return segment_.post(set_, peer).stamp.load(std::memory_order_acquire) == stamp_;
}

// The posts are looked at before the clock is read: in a stream of calls
// the peers' often have come already, or come within poll_hot's pauses.
bool SegmentSmallAllReduce::all_posted(std::chrono::steady_clock::time_point give_up, bool yield,
                                       int hot_polls) const {
  int q = 1;
  auto all = [&] {
    while (q < ctx_.size() && posted((ctx_.rank() + q) % ctx_.size())) ++q;
    return q == ctx_.size();
  };
  if (poll_hot(all, hot_polls)) return true;
  for (;;) {
    if (all()) return true;
    if (std::chrono::steady_clock::now() >= give_up) return false;
    if (yield) sched_yield();  // a peer that shares this core posts meanwhile
  }
}

void SegmentSmallAllReduce::finish() {
  const int p = ctx_.size();
  PostWait(
      ctx_.mesh, [&](int q) { return posted(q); }, segment_.asleep(ctx_.rank()), stamp_,
      sizeof(Header) + data_.bytes())
      .run();
  check_headers();
  if (data_.count > 0) {  // reduce the p posts, in rank order on every rank
    combine(op_, data_.dtype, data_.data, segment_.post(set_, 0).data(),
            segment_.post(set_, 1).data(), data_.count);
    for (int q = 2; q < p; ++q) {
      combine(op_, data_.dtype, data_.data, data_.data, segment_.post(set_, q).data(), data_.count);
    }
    if (op_ == ReduceOp::kAvg) divide(data_.dtype, data_.data, data_.count, p);
  }
  ctx_.mesh.finish();
}

// The poster's half of the handshake of shm_ring.h: its stamp is stored; a
// full fence; then a peer whose flag holds this exchange's stamp (it raised
// it to wait for this exchange, or to glance at it) gets a doorbell on the
// link it polls for this rank. Taking the flag down with a compare-exchange
// makes one sleep cost one doorbell; a flag that names another exchange is
// left alone, for that exchange's posters.
void SegmentSmallAllReduce::wake_sleepers() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int q = 0; q < ctx_.size(); ++q) {
    if (q == ctx_.rank()) continue;
    std::atomic<uint64_t>& flag = segment_.asleep(q);
    uint64_t expected = stamp_;
    if (flag.load(std::memory_order_relaxed) == stamp_ &&
        flag.compare_exchange_strong(expected, 0, std::memory_order_relaxed)) {
      ctx_.mesh.ring(q);
    }
  }
}

void glance_at_posts(GroupSegment& segment, const Mesh& mesh) {
  const int r = mesh.rank();
  const uint64_t next = segment.last_stamp() + 1;
  segment.asleep(r).store(next, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const Header& current = mesh.header();
  for (int q = 0; q < mesh.size(); ++q) {
    if (q == r) continue;
    Post& post = segment.post(int(next & 1), q);
    if (post.stamp.load(std::memory_order_acquire) != next) continue;
    if (post.header.seq != current.seq || post.header.group != current.group) continue;
    if (auto why = mismatch(post.header, current)) {
      throw LinkError(q, true, str_cat("header mismatch with rank ", q, ": ", *why));
    }
  }
}

// Every rank posts its header with its data: a peer that runs another call
// under this sequence number (another op, size, dtype or reduction) is
// named, as a link's header check would.
void SegmentSmallAllReduce::check_headers() const {
  const Header& expected = ctx_.mesh.header();
  for (int q = 0; q < ctx_.size(); ++q) {
    if (q == ctx_.rank()) continue;
    if (auto why = mismatch(segment_.post(set_, q).header, expected)) {
      throw LinkError(q, true, str_cat("header mismatch with rank ", q, ": ", *why));
    }
  }
}

}  // namespace spmd::dist::shm
