// The two built-in communication hooks of DDP (see ddp_comm_hooks.h).
#include "parallel/ddp_comm_hooks.h"

#include "runtime/error.h"
#include "tensor/ops.h"

namespace spmd::dist {

Work allreduce_hook(ProcessGroup& group, const GradBucket& bucket) {
  return group.all_reduce(bucket.buffer, ReduceOp::kAvg);
}

Work bf16_compress_hook(ProcessGroup& group, const GradBucket& bucket) {
  SPMD_CHECK(is_floating(bucket.buffer.dtype()), "bf16_compress_hook: bucket ", bucket.index,
             " holds ", dtype_name(bucket.buffer.dtype()), " gradients, not floating ones");
  const Tensor compressed = ops::to(bucket.buffer, DType::kBF16);  // half the bytes
  Work work = group.all_reduce(compressed, ReduceOp::kAvg);
  // Widen the average back into the f32 bucket before anyone waiting on the
  // Work wakes (callbacks run before waiters are released). The callback
  // holds the two tensors until then.
  const Tensor buffer = bucket.buffer;
  work.on_complete([work, compressed, buffer] {
    if (work.exception() == nullptr) ops::copy_(buffer, compressed);
  });
  return work;
}

}  // namespace spmd::dist
