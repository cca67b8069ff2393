// The reducer: the part of DistributedDataParallel that averages gradients
// while backward is still running (PyTorch's torch/csrc/distributed/c10d/
// reducer.cpp, in its simplest form).
//
// Averaging every gradient after backward would leave the network idle
// during backward and the CPU (or GPU) idle during the averaging. Instead:
//
//   1. At construction the parameters are grouped into buckets of about
//      bucket_cap bytes, in *reverse* registration order: backward produces
//      the last layer's gradients first, so the first bucket fills first.
//      (The very first bucket is kept small, first_bucket_cap, so that
//      communication starts early.) Each bucket owns one flat buffer.
//   2. A post-accumulate-grad hook on every parameter fires the moment its
//      gradient is final: it copies the gradient into its slot of the
//      bucket and marks it ready.
//   3. When a bucket's last parameter is ready, the bucket's all_reduce
//      (average) is launched asynchronously, and backward goes on computing
//      earlier layers while the communicator's thread moves the bytes.
//      Buckets are launched strictly in index order, so every rank issues
//      the same collectives in the same order even if readiness differs.
//   4. At the end of backward (a callback queued on the autograd engine),
//      the reducer waits for the buckets still in flight and copies the
//      averaged gradients back into every parameter's .grad.
//
// A parameter that got no gradient would leave its bucket unlaunched
// forever: without find_unused_parameters that is an error naming it (not a
// hang); with it, its slot contributes zeros, and a parameter no rank used
// keeps its .grad untouched (an extra all_reduce of a used-flag per
// parameter tells which).
//
// Not here: PyTorch's gradient-as-bucket-view (gradients are copied in and
// out of the buckets: two memcpys per step), static graphs, and rebuilding
// the buckets in the order gradients actually arrived.
//
// How long the buckets took, and how much of it backward hid, is not the
// reducer's business: an observer (ddp_sync_timer.h) is told of each step.
//
// Thread-safety: every method runs on the thread that calls forward and
// backward.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/comm/process_group.h"
#include "parallel/ddp/ddp_comm_hooks.h"
#include "tensor/tensor.h"

namespace spmd::dist {

// What the reducer tells an observer (ddp_sync_timer.h times the buckets
// this way), on the thread that runs backward. Must not throw.
class ReducerObserver {
 public:
  virtual ~ReducerObserver() = default;
  // The first gradient of a synchronized backward is ready.
  virtual void backward_started() = 0;
  // Bucket `index` (`bytes` long) was launched as `work`.
  virtual void bucket_launched(size_t index, const Work& work, size_t bytes) = 0;
  // Backward has run its last node; the reducer begins waiting for the buckets.
  virtual void waiting_started() = 0;
  // Every bucket is reduced and copied back into the .grads.
  virtual void backward_finished() = 0;
};

struct ReducerOptions {
  double bucket_cap_mb = 25;
  double first_bucket_cap_mb = 1;
  bool find_unused_parameters = false;
};

class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  // `parameters`: the trainable parameters with their names, in the
  // module's registration order. Call attach() next.
  Reducer(std::vector<std::pair<std::string, Tensor>> parameters,
          std::shared_ptr<ProcessGroup> group, ReducerOptions options);
  // Registers the post-accumulate-grad hooks. The hooks hold only a weak
  // reference: once the reducer is gone they do nothing.
  void attach();

  // Called by every forward: the next backward reduces gradients when
  // `sync` (DDP outside no_sync(), with grad mode on), else it only
  // accumulates them locally. Clears what a failed backward left behind.
  void prepare_for_backward(bool sync);
  void set_comm_hook(CommHook hook) { comm_hook_ = std::move(hook); }
  // Tells `observer` (or nobody, when null) what each synchronized backward does.
  void set_observer(std::shared_ptr<ReducerObserver> observer) { observer_ = std::move(observer); }

  // Parameter names per bucket, in launch order.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;

 private:
  struct Slot {  // where one parameter's gradient lives in its bucket
    size_t bucket = 0;
    int64_t offset = 0;  // in elements
  };
  struct Bucket {
    GradBucket grad_bucket;
    std::vector<size_t> params;  // indices into params_
    size_t pending = 0;          // parameters not yet ready in this backward
    Work work;
  };

  void build_buckets(const ReducerOptions& options);
  void on_gradient_ready(size_t param);
  void launch_ready_buckets();
  void finalize_backward();
  void handle_unused_parameters(const std::vector<size_t>& missing);
  void write_back(const std::vector<bool>& globally_used);
  void wait_launched_and_reset();
  Tensor slot_view(size_t param) const;

  std::vector<std::pair<std::string, Tensor>> params_;
  std::shared_ptr<ProcessGroup> group_;
  bool find_unused_;
  CommHook comm_hook_;
  std::shared_ptr<ReducerObserver> observer_;  // may be null
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;

  // The state of one backward.
  bool expect_hooks_ = false;          // the last forward asked for synchronization
  bool in_backward_ = false;           // a hook fired and the finalize callback is queued
  std::vector<bool> ready_;            // its gradient is in its bucket
  std::vector<bool> used_since_sync_;  // it got a gradient since the last synchronization
  size_t next_bucket_ = 0;             // the next bucket to launch
};

}  // namespace spmd::dist
