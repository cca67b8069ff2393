// Communication hooks: how DistributedDataParallel reduces one bucket of
// gradients, as a function the user can replace (PyTorch's
// DistributedDataParallel.register_comm_hook and its ddp_comm_hooks).
//
// The default hook averages the bucket with one all_reduce. The bf16 hook
// sends half the bytes: it rounds the gradients to bfloat16 (8 bits of
// mantissa, the exponent range of f32, so nothing overflows), averages those
// (the communicator sums bf16 in f32 and rounds each partial sum, as NCCL
// does), and widens the result back into the f32 bucket. Gradients then
// carry a relative error of about 2^-8 per rounding, which SGD and Adam
// tolerate; the parameters and the optimizer stay in f32.
//
// A hook of your own (top-k sparsification, PowerSGD, error feedback) has
// the same shape: start the communication, return its Work, and have the
// averaged gradients in bucket.buffer by the time that Work completes
// (Work::on_complete runs a copy-back on the completing thread; on a GPU,
// queue it on the stream the hook was called on, as bf16_compress_hook does).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "parallel/comm/process_group.h"
#include "tensor/tensor.h"

namespace spmd::dist {

// One bucket as a communication hook sees it.
struct GradBucket {
  size_t index = 0;  // launch order: 0 holds the model's last parameters
  // Flat and contiguous: this rank's gradients of the bucket's parameters,
  // one after another.
  Tensor buffer;
  std::vector<std::string> parameter_names;
};

// Starts the reduction of one bucket and returns its Work. When that Work
// completes, bucket.buffer must hold the gradients averaged over the group.
// Hooks are called on the backward thread, in bucket order on every rank, so
// the collectives they issue match across ranks.
using CommHook = std::function<Work(ProcessGroup& group, const GradBucket& bucket)>;

// The default: all_reduce(avg) of the buffer in place.
Work allreduce_hook(ProcessGroup& group, const GradBucket& bucket);
// all_reduce(avg) of a bf16 copy, widened back into the buffer on completion.
// REQUIRES: a floating buffer (f32, or already bf16/f16/f64).
Work bf16_compress_hook(ProcessGroup& group, const GradBucket& bucket);

}  // namespace spmd::dist
