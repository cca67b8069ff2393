// Fully sharded data parallelism (16.7), as PyTorch's FSDP2 (fully_shard).
//
// DDP keeps a whole copy of the model, its gradients and its optimizer state
// on every rank. FSDP keeps 1/N of each: every parameter is cut along dim 0
// across the N ranks of the shard axis, and a rank holds, updates and saves
// only its chunk. A unit (a TransformerBlock; then the root for the rest)
// is gathered whole just before it computes and freed right after:
//
//   auto mesh = DeviceMesh(world, {4}, {"dp_shard"});
//   for (size_t i = 0; i < model->layers->size(); ++i)
//     fully_shard(model->layers->at(i), mesh);
//   fully_shard(model, mesh);                        // the root: embeddings, norm, head
//   optim::AdamW opt(model->parameters(), {...});   // the shards
//   for (...) { loss = ...(*model)(x)...; backward(loss); opt.step(); opt.zero_grad(); }
//
// The life of one unit's parameters through a step:
//
//   forward:  pre-hook   all_gather the unit (one collective into one buffer),
//                        copy it out into the full parameters, point the
//                        module at them; issue the next unit's all_gather
//                        (prefetch: it runs while this unit computes)
//             forward    the module computes with the full parameters
//             post-hook  reshard: release the full parameters' bytes
//                        (reshard_after_forward; the root keeps its own)
//   backward: pre-backward   (the gradient of the unit's output arrives)
//                        all_gather again, prefetch the unit before it
//             backward   gradients accumulate into the full parameters
//             post-backward  (its last parameter's gradient is in) release
//                        the full parameters, reduce_scatter (average) the
//                        full gradients into the shards' gradients, free them
//   step:     the optimizer updates the shards; its state is 1/N too
//
// The reduce_scatter runs while the next unit's backward computes; a unit
// waits for the previous one's before issuing its own, so at most one is in
// flight. With HSDP (a 2-D mesh, dp_replicate x dp_shard) parameters are
// sharded within a replica and each reduced shard is averaged across
// replicas. A parameter that tensor parallelism split is sharded again: its
// local piece is cut along dim 0 on the shard axis, its TP layout kept as
// the parent of the FSDP one (parallel/placement.h).
//
// The root is the first unit whose forward runs; it learns the units below
// it then (in module order, which is the order prefetch follows: forward
// for forward, reverse for backward), keeps its own parameters gathered
// from forward to the end of backward (they would be gathered again at
// once), and at the end of backward waits for the last reductions and
// reshards everything.
//
// Not here: module inputs other than one tensor, CPU offload, FSDP1's flat
// parameters, gathering a unit that is used twice in one forward.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/nn/module.h"
#include "parallel/device_mesh.h"
#include "parallel/fsdp/param_group.h"

namespace spmd::dist {

struct FsdpOptions {
  // Release a unit's full parameters after its forward and gather them again
  // for backward (less memory, one more all_gather per unit); false keeps
  // them from forward to backward. The root always keeps its own.
  bool reshard_after_forward = true;
  // Issue the next unit's all_gather before this unit computes (forward and
  // backward), so communication overlaps compute.
  bool prefetch = true;
  MixedPrecision mixed_precision;
  // The mesh axis to shard along: "" for a 1-D mesh's only axis. It may be
  // a flattened axis (mesh.flatten({"dp_shard", "cp"}, "dp_shard_cp")); the
  // shards' placements are then recorded on its 1-D mesh.
  std::string shard_axis;
  // HSDP: the mesh axis across which the shards are replicated ("" for none).
  std::string replicate_axis;
  // Parameters the unit leaves alone (FSDP2's ignored_params): not sharded,
  // gathered or reduced; their gradients accumulate as without FSDP, for the
  // caller to synchronize (expert parallelism's experts, which differ
  // between the ranks of the shard axis).
  std::vector<Tensor> ignored_params;
};

// What one unit's collectives did in the last step that ran it.
struct FsdpUnitTimes {
  std::string unit;
  std::vector<CommTimes> gathers, reduces;
  int64_t forward_start_us = 0, forward_end_us = 0;  // the module's own forward
};

class FsdpModule {
 public:
  // Use fully_shard().
  FsdpModule(nn::Module& module, const DeviceMesh& mesh, FsdpOptions options);
  ~FsdpModule();
  FsdpModule(const FsdpModule&) = delete;
  FsdpModule& operator=(const FsdpModule&) = delete;

  nn::Module& module() { return *module_; }
  // The unit's path below its root ("layers.3"; "root" for the root), once
  // a forward has run; before, the module's type name.
  const std::string& name() const { return name_; }
  bool is_root() const { return root_ == this; }
  ParamGroup& params() { return *group_; }

  // Gathers the unit now (the module then holds its full parameters), or
  // frees them again. For inspection or a forward outside the hooks.
  void unshard();
  void reshard();

  // false: backwards accumulate the full gradients locally, with no
  // reduce_scatter (gradient accumulation; FSDP2's no_sync). The first
  // backward after setting it back to true reduces the sums, or
  // reduce_gradients() does. Applies to this unit and, with recurse, every
  // unit below it.
  void set_requires_gradient_sync(bool sync, bool recurse = true);
  void set_reshard_after_forward(bool reshard);
  // false: the unit stays gathered after its backward (FSDP2's
  // set_reshard_after_backward), until reshard() or reduce_gradients(); for
  // a split backward whose weight pass runs later and reads the weights (a
  // norm's gain). This unit and, with recurse, every unit below it.
  void set_reshard_after_backward(bool reshard, bool recurse = true);
  void set_prefetch(bool prefetch);

  // Reduces now what backwards accumulated while gradient sync was off:
  // the full gradients, reduce-scattered (averaged; across replicas too
  // under HSDP) and added into the shards' gradients; then reshards. For
  // gradients that arrive outside a backward's accounting (a zero-bubble
  // pipeline's deferred weight passes), or to pay one reduction per step.
  // This unit only. REQUIRES: no backward is running; collective over the
  // unit's shard (and replicate) group, every rank calling its units in the
  // same order.
  void reduce_gradients();
  // reduce_gradients() of several units: every unit's reduction is issued
  // before the first is waited for, so a unit's packing of its gradients
  // overlaps the reduce-scatters of the units before it. Same REQUIRES.
  static void reduce_gradients(const std::vector<FsdpModule*>& units);

  // The root's units in forward order (itself first); empty until a forward.
  const std::vector<FsdpModule*>& units() const { return units_; }
  // Per unit: the last step's collectives (issue, completion, wait) and
  // forward span. Cleared at each root forward.
  std::vector<FsdpUnitTimes> timeline() const;
  // The most bytes the root's units held unsharded at once (full
  // parameters, full gradients, flat buffers) since the last reset.
  size_t peak_unsharded_bytes() const { return peak_unsharded_; }
  void reset_peak_unsharded_bytes() { peak_unsharded_ = 0; }

 private:
  friend struct PreBackward;
  friend std::shared_ptr<FsdpModule> fully_shard(const std::shared_ptr<nn::Module>&,
                                                 const DeviceMesh&, FsdpOptions);
  void pre_forward();
  void post_forward(Tensor& output);
  void pre_backward();
  void post_backward();
  void end_of_backward();  // the root's, queued at its pre-backward
  void lazy_init_as_root();
  // The units below this one (not itself), in named_modules() order. Not
  // units_: that is the root's, and is empty until the first forward, while
  // the setters that recurse are called before it.
  std::vector<std::shared_ptr<FsdpModule>> units_below() const;
  void note_memory();
  FsdpModule* neighbour(int step) const;  // the unit `step` places after this one in order

  nn::Module* module_;
  std::unique_ptr<ParamGroup> group_;
  FsdpOptions options_;
  std::string name_;
  int hooks_[2] = {-1, -1};

  FsdpModule* root_ = nullptr;       // set at the first forward
  std::vector<FsdpModule*> units_;   // the root's: itself, then the units below in order
  int index_ = 0;                    // this unit's place in its root's units_
  bool sync_gradients_ = true;
  bool reshard_after_backward_ = true;
  // One backward's progress.
  bool in_backward_ = false;
  bool reduced_ = false;
  int grads_expected_ = 0, grads_seen_ = 0;
  FsdpModule* pending_reduce_ = nullptr;  // the root's: the unit whose reduce_scatter is in flight
  bool callback_queued_ = false;
  size_t peak_unsharded_ = 0;
  int64_t forward_start_us_ = 0, forward_end_us_ = 0;
};

// Shards `module`'s parameters (those not already in a unit below it) over
// the mesh and installs the hooks that gather and reshard them. Apply it to
// the units bottom up, the root last. The returned handle shares ownership
// with the module's hooks; the module keeps its identity (as FSDP2, it is
// not wrapped). Throws InvalidArgument for a module already sharded, a mesh
// axis that does not exist, or a parameter another unit holds.
std::shared_ptr<FsdpModule> fully_shard(const std::shared_ptr<nn::Module>& module,
                                        const DeviceMesh& mesh, FsdpOptions options = {});
// The unit fully_shard made of `module`, or null.
std::shared_ptr<FsdpModule> fsdp_unit_of(const nn::Module& module);

}  // namespace spmd::dist
