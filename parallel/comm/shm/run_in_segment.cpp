// Which shared-memory path runs a collective (see the header).
#include "parallel/comm/shm/run_in_segment.h"

#include <cstring>

#include "parallel/comm/shm/byte_ranges.h"
#include "parallel/comm/shm/segment_all_reduce.h"
#include "parallel/comm/shm/segment_collectives.h"
#include "parallel/comm/shm/segment_small_all_reduce.h"
#include "parallel/comm/shm/zero_copy.h"

namespace spmd::dist::shm {
namespace {

// Step 2: zero copy, when the group has it on, the shared buffer is large
// enough, and every rank's is shareable and mapped (decided in the
// segment, alike on every rank).
bool try_zero_copy(const Context& ctx, GroupSegment& segment, OpType type, Span whole, Span in,
                   int root, ReduceOp op) {
  const size_t from = segment.zero_copy_bytes();
  const std::optional<SharedBuffer> shared = zero_copy_buffer(ctx, type, whole, in);
  if (from == 0 || !shared || shared->span.bytes() < from) return false;
  const std::vector<char*> at = map_peer_buffers(ctx, segment, *shared);
  if (at.empty()) return false;
  run_zero_copy(ctx, segment, at, type, whole, in, root, op);
  return true;
}

}  // namespace

bool run_in_segment(const Context& ctx, GroupSegment& segment, OpType type, Span whole, Span in,
                    int root, ReduceOp op) {
  const size_t p = size_t(ctx.size());
  const Tuning& t = ctx.tuning;
  if (type == OpType::kAllReduce && segment.fits_post(whole.bytes())) {  // 1. the posts
    SegmentSmallAllReduce(ctx, segment, whole, op).run();
    return true;
  }
  if (type == OpType::kAllGather && whole.bytes() >= segment.min_bytes()) {  // 2. or 3.
    char* mine = whole.at(size_t(ctx.rank()) * in.count);                    // this rank's block
    const bool overlap = mine != in.data && overlaps(mine, in.bytes(), in.data, in.bytes());
    if (overlap) {  // moved whole first; else the algorithm copies it (piece by piece)
      std::memmove(mine, in.data, in.bytes());
      in.data = mine;
    }
  }
  if (try_zero_copy(ctx, segment, type, whole, in, root, op)) return true;  // 2.
  switch (type) {                                                           // 3. the slots
    case OpType::kAllReduce:
      if (whole.bytes() <= t.small_all_reduce_bytes) return false;
      SegmentAllReduce(ctx, segment, whole, op).run();
      return true;
    case OpType::kBroadcast:
      // On 2 ranks the chain over the rings copies as often and, publishing
      // every 64 KiB, pipelines more finely than a barrier per slot: it was
      // as fast or faster there (docs/measurements/shm.md).
      if (p < 3 || whole.bytes() < segment.min_bytes()) return false;
      SegmentBroadcast(ctx, segment, whole, root).run();
      return true;
    case OpType::kAllGather:
      if (whole.bytes() < segment.min_bytes()) return false;
      SegmentAllGather(ctx, segment, whole, in).run();
      return true;
    case OpType::kReduceScatter:
      if (in.bytes() < segment.min_bytes() || segment.slot_bytes() < (p - 1) * in.elem) {
        return false;
      }
      SegmentReduceScatter(ctx, segment, in, whole, op).run();
      return true;
    default:
      return false;  // 4.
  }
}

}  // namespace spmd::dist::shm
