// Averaging gradients by hand, for the strategies whose gradients are
// synchronized after backward rather than during it (DDP's buckets overlap
// the all_reduce with backward; these do not): expert parallelism's two
// averages, and a pipeline stage's gradients over its data-parallel copies.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/comm/process_group.h"

namespace spmd::dist {

// The most bytes of gradients one all_reduce of average_gradients carries
// through a flat buffer: DDP's default bucket_cap_mb, 25 MB.
inline constexpr int64_t kAverageBucketBytes = 25 * 1000 * 1000;

// Every parameter's gradient (zeros where backward never reached it, as on
// a rank whose stage or experts a parameter's gradient does not flow
// through) times `scale`, averaged over `group` (null or one rank: only
// scaled, in place). Consecutive gradients go in buckets of up to
// kAverageBucketBytes, each one all_reduce of a flat copy of them: the copy
// held is one bucket's, not every gradient's. A gradient of a bucket's size
// or more is reduced alone, in place, without a copy.
// Collective over `group`: every rank passes the same parameters' shapes
// in the same order.
void average_gradients(const std::vector<Tensor>& params, ProcessGroup* group, double scale = 1.0);

}  // namespace spmd::dist
