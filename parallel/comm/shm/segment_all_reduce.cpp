// The shared-segment all_reduce (see the header).
#include "parallel/comm/shm/segment_all_reduce.h"

#include <algorithm>

#include "parallel/comm/shm/byte_ranges.h"
#include "parallel/comm/shm/segment_small_all_reduce.h"
#include "parallel/comm/tcp/reduce.h"

namespace spmd::dist::shm {

void SegmentAllReduce::run() {
  const int p = ctx_.size(), r = ctx_.rank();
  const size_t elem = data_.elem;
  const size_t per_chunk = segment_.slot_bytes() / elem;
  for (size_t first = 0; first < data_.count; first += per_chunk) {
    const size_t n = std::min(per_chunk, data_.count - first);
    const int set = segment_.next_set();
    auto part = [&](int k, char* base) {  // part k of the chunk in a slot or the tensor
      return base + part_begin(n, size_t(p), size_t(k)) * elem;
    };
    auto bytes = [&](int k) { return part_size(n, size_t(p), size_t(k)) * elem; };
    char* chunk = data_.at(first);
    char* mine = segment_.slot(set, r);
    for (int k = 0; k < p; ++k) {  // 1. copy in the parts the others reduce
      if (k != r) copy_bytes(part(k, mine), part(k, chunk), bytes(k));
    }
    segment_barrier(ctx_, segment_);  // 2.
    char* own = part(r, chunk);       // 3. reduce part r into the tensor
    const size_t count = part_size(n, size_t(p), size_t(r));
    for (int k = 1; k < p; ++k) {
      combine(op_, data_.dtype, own, own, part(r, segment_.slot(set, mod(r + k, p))), count);
    }
    if (op_ == ReduceOp::kAvg) divide(data_.dtype, own, count, p);
    copy_bytes(part(r, mine), own, bytes(r));  // and into the slot, for the others
    segment_barrier(ctx_, segment_);           // 4.
    for (int k = 0; k < p; ++k) {              // 5. copy out the parts the others reduced
      if (k != r) copy_bytes(part(k, chunk), part(k, segment_.slot(set, k)), bytes(k));
    }
  }
  ctx_.mesh.finish();
}

// The links carry each collective's header only once, so every round needs a
// byte to count.
void segment_barrier(const Context& ctx, GroupSegment& segment) {
  if (segment.post_bytes() > 0) {
    return SegmentSmallAllReduce(ctx, segment, Span{nullptr, 0, DType::kU8, 1}, ReduceOp::kSum)
        .run();  // no data: only the posts' stamps and headers
  }
  static const char token = 1;
  const int p = ctx.size(), r = ctx.rank();
  for (int dist = 1; dist < p; dist *= 2) {
    ctx.mesh.link(mod(r + dist, p)).send(&token, 1);
    tcp::Link& from = ctx.mesh.link(mod(r - dist, p));
    char got = 0;
    ctx.mesh.wait_recv(from, from.recv(&got, 1));
  }
}

}  // namespace spmd::dist::shm
