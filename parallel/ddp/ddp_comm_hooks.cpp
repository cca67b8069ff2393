// The two built-in communication hooks of DDP (see ddp_comm_hooks.h).
#include "parallel/ddp/ddp_comm_hooks.h"

#include <optional>

#include "runtime/error.h"
#include "tensor/cuda_api.h"
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
  // holds the two tensors until then. It runs on the thread that completes
  // the Work (NCCL's watchdog, TCP's worker, or a waiter), whose current
  // stream need not be the caller's: on a GPU the copy goes to the stream
  // this hook was called on, so the caller's work after wait() comes after
  // it, and `compressed` returns to that stream's free list behind it.
  const Tensor buffer = bucket.buffer;
  std::optional<cuda::Stream> stream;
  if (buffer.is_cuda()) stream = cuda::current_stream(buffer.device().index);
  work.on_complete([work, compressed, buffer, stream] {
    if (work.exception() != nullptr) return;
    std::optional<cuda::StreamGuard> on_caller_stream;
    if (stream) on_caller_stream.emplace(*stream);
    ops::copy_(buffer, compressed);
  });
  return work;
}

}  // namespace spmd::dist
