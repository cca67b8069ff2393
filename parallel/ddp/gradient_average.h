// Averaging gradients by hand, for the strategies whose gradients are
// synchronized after backward rather than during it (DDP's buckets overlap
// the all_reduce with backward; these do not): expert parallelism's two
// averages, and a pipeline stage's gradients over its data-parallel copies.
#pragma once

#include <vector>

#include "parallel/comm/process_group.h"

namespace spmd::dist {

// Every parameter's gradient (zeros where backward never reached it, as on
// a rank whose stage or experts a parameter's gradient does not flow
// through) times `scale`, averaged over `group` (null or one rank: only
// scaled, in place), as one flat buffer in one all_reduce (a copy of all
// the gradients while it runs). Collective over `group`:
// every rank passes the same parameters' shapes in the same order.
void average_gradients(const std::vector<Tensor>& params, ProcessGroup* group, double scale = 1.0);

}  // namespace spmd::dist
