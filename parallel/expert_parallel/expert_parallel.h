// Expert parallelism (16.8.2): the experts of every nn::MoE in a model split
// over the mesh's "ep" axis, their tokens moved there and back by
// all_to_all (dispatch.h), and the gradient arithmetic that makes the ranks
// train as one process on all their batches together.
//
//   auto model = std::make_shared<nn::Transformer>(config, seed);  // the same seed everywhere
//   dist::DeviceMesh mesh(world, {ep}, {"ep"});                   // or {dp, ep}, {"dp", "ep"}
//   auto ep = dist::ep::parallelize_experts(*model, mesh);        // E / ep experts per MoE here
//   optim::AdamW opt(model->parameters(), {...});
//   Tensor loss = cross_entropy((*model)(x), y) + coef * nn::moe_aux_loss(*model);  // our rows
//   backward(loss);
//   dist::ep::sync_gradients(*model, ep);
//   opt.step();
//
// Every rank of dp x ep reads its own rows of the batch (data parallel over
// both axes, equal rows each); the ep ranks of one line then trade tokens.
//
// Placement: expert e of a layer lives on ep rank e / L, L = E / ep. The
// stacked expert weights (E, ...) are cut along dim 0 and carry Shard(0) on
// "ep" (Replicate on "dp"), so full_tensor() and the checkpoint see all E.
//
// Gradients. Each rank's loss is the mean over its own tokens, and the
// batch's is the mean of those, so the gradient wanted is the mean over the
// dp x ep ranks of what each rank's loss contributes:
//   - dense parameters (attention, norms, embeddings, the routers) are
//     replicated, and each copy holds the gradient of its own rank's loss:
//     averaged over dp x ep, as data parallelism does;
//   - an expert weight has one owner per dp replica, and the all_to_all's
//     backward has already brought it the gradients of every ep rank's
//     loss, a sum over ep: divided by ep, then averaged over dp (the ranks
//     that hold a copy of that expert).
// The balancing loss's f and P are the batch's (summed over dp x ep), so
// every rank's loss carries the same aux term; the gradient of the summed P
// is summed back over the ranks, so after the average the routers get
// exactly the gradient of coef * aux.
//
// Not here: overlapping the gradient all_reduce with backward (DDP's buckets
// would apply the same arithmetic), sharding the experts over dp (FSDP: they
// are left out of its units, and FSDP then shards only the dense ones), tp
// inside an expert, dropping tokens per global batch rather than per rank.
#pragma once

#include <memory>
#include <vector>

#include "autograd/nn/module.h"
#include "parallel/device_mesh.h"
#include "parallel/expert_parallel/dispatch.h"

namespace spmd::dist::ep {

// What parallelize_experts set up.
struct ExpertParallelism {
  std::shared_ptr<ProcessGroup> ep;                              // the experts' axis
  std::shared_ptr<ProcessGroup> dp;                              // null without a "dp" axis
  std::shared_ptr<ProcessGroup> batch;                           // dp x ep: every rank of one batch
  std::vector<std::shared_ptr<AllToAllDispatcher>> dispatchers;  // one per MoE, in module order
};

// Keeps this rank's E / ep experts of every nn::MoE in `model` (fresh
// leaves with their placements) and installs the all_to_all dispatcher.
// REQUIRES: the mesh's axes are "ep" and, optionally, "dp" (outermost);
// every rank built the model from the same seed; every MoE's n_experts
// divides by ep and none is split yet (InvalidArgument naming the layer,
// before anything changes). Collective over the world (the dp x ep group).
ExpertParallelism parallelize_experts(nn::Module& model, DeviceMesh& mesh);

// After backward, before the optimizer step: dense gradients averaged over
// dp x ep, expert gradients divided by ep and averaged over dp. A parameter
// no gradient reached counts as zeros. Collective over the world.
void sync_gradients(nn::Module& model, const ExpertParallelism& ep);

// sync_gradients' expert half alone: for when FSDP shards the dense
// parameters over the same ranks and its reduce-scatters average them (and
// the experts are its ignored_params). Collective over the dp group.
void sync_expert_gradients(nn::Module& model, const ExpertParallelism& ep);

// Whether a parameter is an expert shard (Shard on the "ep" axis).
bool is_expert_shard(const Tensor& param);

}  // namespace spmd::dist::ep
