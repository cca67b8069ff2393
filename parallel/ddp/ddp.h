// DistributedDataParallel (DDP): data parallelism as PyTorch does it. Every
// rank holds a full copy of the model and trains it on its own shard of the
// data (parallel/sampler.h); after each backward the ranks' gradients are
// averaged, so every copy takes the same optimizer step and the copies stay
// identical, as if one process had trained on the union of the shards.
//
//   auto model = std::make_shared<nn::Transformer>(config, seed);
//   auto ddp = std::make_shared<dist::DistributedDataParallel>(model, world);
//   optim::AdamW opt(ddp->parameters(), {...});
//   for (...) {
//     Tensor loss = cross_entropy((*ddp)(x), y);
//     opt.zero_grad();
//     backward(loss);   // gradients are averaged over the ranks during backward
//     opt.step();
//   }
//
// What the wrapper does:
//   - construction: checks that every rank has the same parameters (names,
//     shapes, dtypes; a clear error naming the first difference, never a
//     hang or a garbled broadcast), then broadcasts rank 0's parameters and
//     buffers, so the copies start equal whatever each rank's seed was;
//   - forward: runs the module and arms the reducer (parallel/ddp/ddp_reducer.h),
//     which averages gradients bucket by bucket *while backward runs* and
//     waits for the last buckets at its end;
//   - no_sync(): forwards and backwards inside it only accumulate gradients
//     locally (gradient accumulation); the first backward after it averages
//     the accumulated sums;
//   - register_comm_hook(): replace how a bucket is reduced (bf16 compression,
//     parallel/ddp/ddp_comm_hooks.h).
//
// Not here: buffers broadcast again at every forward (PyTorch's
// broadcast_buffers, which only modules with running statistics such as
// BatchNorm need; none of spmd's modules update buffers in forward), and
// module inputs other than one tensor.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/nn/module.h"
#include "parallel/comm/process_group.h"
#include "parallel/ddp/ddp_comm_hooks.h"
#include "parallel/ddp/ddp_reducer.h"
#include "parallel/ddp/ddp_sync_timer.h"

namespace spmd::dist {

struct DdpOptions {
  // Gradient bucket size: larger buckets mean fewer, more efficient
  // collectives; smaller ones start communicating earlier in backward.
  double bucket_cap_mb = 25;
  // The first bucket (the model's last parameters) is kept small so that
  // communication starts early, as in PyTorch (1 MiB).
  double first_bucket_cap_mb = 1;
  // Allow parameters that receive no gradient in a backward (they count as
  // zeros; one extra small all_reduce per step). Without it such a
  // parameter is an error naming it.
  bool find_unused_parameters = false;
};

class DistributedDataParallel : public nn::Module {
 public:
  // Wraps `module` (registered as the child "module", so this wrapper's
  // parameters are named "module.<name>", as in PyTorch). Collective over
  // `group`: every rank constructs its DDP at the same point.
  // Throws InvalidArgument when the ranks' parameters differ (naming the
  // first difference) or an option is out of range.
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DdpOptions options = {});

  // module(x), with the reducer armed for the backward of its result.
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "DistributedDataParallel"; }
  nn::Module& module() { return *module_; }
  ProcessGroup& group() { return *group_; }

  // While a NoSync is alive, forwards prepare no gradient averaging: their
  // backwards accumulate into .grad locally.
  class [[nodiscard]] NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }

  // Replaces how each bucket is reduced (default: allreduce_hook). Call it
  // on every rank before the first backward.
  void register_comm_hook(CommHook hook);

  // Parameter names per gradient bucket, in launch order (the last
  // parameters first).
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  // When the last synchronized backward's buckets were reduced: the overlap
  // of communication with backward.
  // (SyncTimer, ddp_sync_timer.h, watching the reducer.)
  const SyncTimeline& last_sync() const { return timer_->last(); }

 private:
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  std::shared_ptr<Reducer> reducer_;
  std::shared_ptr<SyncTimer> timer_ = std::make_shared<SyncTimer>();
  bool sync_ = true;
};

// Throws InvalidArgument, on every rank, unless every rank of `group` has the
// same parameters and buffers in `module` (names, shapes, dtypes, in order);
// the message names the first rank and the first entry that differ from rank
// 0's. Collective over `group` (one all_gather_object of the descriptions).
void verify_same_parameters(ProcessGroup& group, const nn::Module& module);

// Copies rank root's tensors into every other rank's, in place (each a
// broadcast, all issued before any is waited on). Collective over `group`.
void broadcast_tensors(ProcessGroup& group, const std::vector<Tensor>& tensors, int root = 0);

}  // namespace spmd::dist
