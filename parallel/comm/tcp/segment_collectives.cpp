// The shared-segment broadcast, all_gather and reduce_scatter, and the choice
// of which collectives run in the segment (see the header).
#include "parallel/comm/tcp/segment_collectives.h"

#include <algorithm>
#include <cstring>

#include "parallel/comm/tcp/byte_ranges.h"
#include "parallel/comm/tcp/reduce.h"
#include "parallel/comm/tcp/segment_small_all_reduce.h"
#include "parallel/comm/tcp/zero_copy.h"

namespace spmd::dist::tcp {
namespace {

// Chunks of up to `per` elements covering `count`: at least one, so that an
// empty collective still runs its barrier (and its header check).
size_t chunks_of(size_t count, size_t per) { return std::max<size_t>(1, (count + per - 1) / per); }

}  // namespace

bool run_in_segment(const Context& ctx, GroupSegment& segment, OpType type, Span whole, Span in,
                    int root, ReduceOp op) {
  const size_t p = size_t(ctx.size());
  const Tuning& t = ctx.tuning;
  if (type == OpType::kAllGather && whole.bytes() >= t.segment_min_bytes) {  // in the segment
    char* mine = whole.at(size_t(ctx.rank()) * in.count);  // this rank's block
    const bool overlap = mine != in.data && overlaps(mine, in.bytes(), in.data, in.bytes());
    if (overlap) {  // moved whole first; else the algorithm copies it (piece by piece)
      std::memmove(mine, in.data, in.bytes());
      in.data = mine;
    }
  }
  if (run_zero_copy(ctx, segment, type, whole, in, root, op)) return true;
  switch (type) {
    case OpType::kAllReduce:
      if (whole.bytes() <= segment.post_bytes()) {
        SegmentSmallAllReduce(ctx, segment, whole, op).run();
        return true;
      }
      if (whole.bytes() <= t.small_all_reduce_bytes) return false;
      SegmentAllReduce(ctx, segment, whole, op).run();
      return true;
    case OpType::kBroadcast:
      // On 2 ranks the chain over the rings copies as often and, publishing
      // every 64 KiB, pipelines more finely than a barrier per slot: it was
      // as fast or faster there (docs/measurements/shm.md).
      if (p < 3 || whole.bytes() < t.segment_min_bytes) return false;
      SegmentBroadcast(ctx, segment, whole, root).run();
      return true;
    case OpType::kAllGather:
      if (whole.bytes() < t.segment_min_bytes) return false;
      SegmentAllGather(ctx, segment, whole, in).run();
      return true;
    case OpType::kReduceScatter:
      if (in.bytes() < t.segment_min_bytes || segment.slot_bytes() < (p - 1) * in.elem) {
        return false;
      }
      SegmentReduceScatter(ctx, segment, in, whole, op).run();
      return true;
    default:
      return false;
  }
}

void SegmentBroadcast::run() {
  const int r = ctx_.rank();
  const size_t elem = data_.elem, per = segment_.slot_bytes() / elem;
  const size_t chunks = chunks_of(data_.count, per);
  for (size_t k = 0; k < chunks; ++k) {
    const size_t first = k * per, n = std::min(per, data_.count - first);
    char* slot = segment_.slot(segment_.next_set(), root_);
    if (r == root_) copy_bytes(slot, data_.at(first), n * elem);  // the root copies in,
    segment_barrier(ctx_, segment_);
    if (r != root_) copy_bytes(data_.at(first), slot, n * elem);  // the others copy out
  }
  ctx_.mesh.finish();
}

void SegmentAllGather::run() {
  const int p = ctx_.size(), r = ctx_.rank();
  const size_t elem = input_.elem, m = input_.count, per = segment_.slot_bytes() / elem;
  char* mine = output_.at(size_t(r) * m);  // this rank's block of the output
  const size_t chunks = chunks_of(m, per);
  for (size_t k = 0; k < chunks; ++k) {
    const size_t first = k * per, n = std::min(per, m - first);
    const int set = segment_.next_set();
    copy_bytes(segment_.slot(set, r), input_.at(first), n * elem);  // this rank's piece in,
    if (mine != input_.data) {  // and into its own block while it is in cache
      copy_bytes(mine + first * elem, input_.at(first), n * elem);
    }
    segment_barrier(ctx_, segment_);
    for (int q = 1; q < p; ++q) {  // every other rank's piece out
      const int from = mod(r + q, p);
      copy_bytes(output_.at(size_t(from) * m + first), segment_.slot(set, from), n * elem);
    }
  }
  ctx_.mesh.finish();
}

// Slot q holds, per chunk, the piece of each block k != q of rank q's input,
// in block order: block k at position k (k < q) or k - 1 (k > q).
void SegmentReduceScatter::run() {
  const int p = ctx_.size(), r = ctx_.rank();
  const size_t elem = output_.elem, m = output_.count;
  const size_t per = segment_.slot_bytes() / (size_t(p - 1) * elem);
  const size_t chunks = chunks_of(m, per);
  for (size_t k = 0; k < chunks; ++k) {
    const size_t first = k * per, n = std::min(per, m - first);
    const int set = segment_.next_set();
    char* slot = segment_.slot(set, r);
    for (int b = 0, at = 0; b < p; ++b) {  // every other block's piece in
      if (b == r) continue;
      copy_bytes(slot + size_t(at++) * n * elem, input_.at(size_t(b) * m + first), n * elem);
    }
    segment_barrier(ctx_, segment_);
    char* out = output_.at(first);
    const char* own = input_.at(size_t(r) * m + first);  // may be out itself (in place)
    for (int q = 1; q < p; ++q) {  // own piece + the others' pieces of block r
      const int from = mod(r + q, p);
      const size_t at = size_t(r < from ? r : r - 1);
      combine(op_, output_.dtype, out, q == 1 ? own : out, segment_.slot(set, from) + at * n * elem,
              n);
    }
    if (op_ == ReduceOp::kAvg) divide(output_.dtype, out, n, p);
  }
  ctx_.mesh.finish();
}

}  // namespace spmd::dist::tcp
