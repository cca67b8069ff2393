// parallelize_experts: check every MoE, then shard its stacked experts and
// install the dispatcher; sync_gradients: the two averages of the header.
#include "parallel/expert_parallel/expert_parallel.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "autograd/nn/moe.h"
#include "parallel/ddp/gradient_average.h"
#include "parallel/placement.h"
#include "tensor/ops.h"

namespace spmd::dist::ep {
namespace {

// The groups of a mesh {"ep"} or {"dp", "ep"}.
ExpertParallelism groups_of(DeviceMesh& mesh) {
  const auto& names = mesh.axis_names();
  const bool ep_only = names == std::vector<std::string>{"ep"};
  const bool dp_ep = names == std::vector<std::string>{"dp", "ep"};
  SPMD_CHECK(ep_only || dp_ep, "expert parallel: the mesh must have the axes {ep} or {dp, ep}, ",
             "not ", mesh.describe());
  ExpertParallelism g;
  g.ep = mesh.group_ptr("ep");
  g.dp = dp_ep ? mesh.group_ptr("dp") : nullptr;
  g.batch = dp_ep ? mesh.flatten({"dp", "ep"}, "dp_ep").group_ptr("dp_ep") : g.ep;
  return g;
}

// Replaces `slot` (E, ...) by this rank's L experts, a fresh leaf with Shard(0) on "ep".
void keep_local_experts(Tensor& slot, const DeviceMesh& mesh) {
  if (!slot.defined()) return;
  const int64_t ranks = mesh.size("ep"), L = slot.size(0) / ranks;
  std::vector<Placement> placements;
  for (const std::string& axis : mesh.axis_names())
    placements.push_back(axis == "ep" ? Placement::shard(0) : Placement::replicate());
  const Shape global = slot.shape();
  NoGradGuard no_grad;
  Tensor local = ops::clone(ops::narrow(slot, 0, mesh.coordinate("ep") * L, L));  // (L, ...)
  local.requires_grad_();
  set_placements(local, mesh, placements, global);
  slot = local;
}

}  // namespace

bool is_expert_shard(const Tensor& param) {
  const LayoutMeta* layout = placements_of(param);
  if (!layout) return false;
  const auto& names = layout->mesh.axis_names();
  const auto it = std::find(names.begin(), names.end(), "ep");
  return it != names.end() && layout->placements[size_t(it - names.begin())].is_shard();
}

ExpertParallelism parallelize_experts(nn::Module& model, DeviceMesh& mesh) {
  ExpertParallelism g = groups_of(mesh);
  const auto layers = nn::moe_layers(model);
  const int64_t ranks = g.ep->size();
  for (const auto& [path, moe] : layers) {  // every check before any change
    const std::string name = path.empty() ? "the MoE" : path;
    SPMD_CHECK(moe->options.n_experts % ranks == 0, "expert parallel: ", name, " has ",
               moe->options.n_experts, " experts, which do not divide over ", ranks, " ep ranks");
    SPMD_CHECK(moe->w1.size(0) == moe->options.n_experts, "expert parallel: ", name, " holds ",
               moe->w1.size(0), " of its ", moe->options.n_experts,
               " experts: it is split already");
  }
  for (const auto& [path, moe] : layers) {
    for (Tensor* slot : {&moe->w1, &moe->b1, &moe->w2, &moe->b2, &moe->w3, &moe->b3})
      keep_local_experts(*slot, mesh);
    auto dispatcher = std::make_shared<AllToAllDispatcher>(g.ep, g.batch);
    moe->set_dispatcher(dispatcher);
    g.dispatchers.push_back(dispatcher);
  }
  return g;
}

namespace {

void sync(nn::Module& model, const ExpertParallelism& g, bool dense_too) {
  std::vector<Tensor> dense, experts;
  for (const Tensor& p : model.parameters()) {
    if (!p.requires_grad()) continue;
    (is_expert_shard(p) ? experts : dense).push_back(p);
  }
  if (dense_too) average_gradients(dense, g.batch.get());  // the mean over dp x ep
  // A sum over ep (the all_to_all's backward), then a mean over dp.
  average_gradients(experts, g.dp.get(), 1.0 / double(g.ep->size()));
}

}  // namespace

void sync_gradients(nn::Module& model, const ExpertParallelism& g) { sync(model, g, true); }
void sync_expert_gradients(nn::Module& model, const ExpertParallelism& g) { sync(model, g, false); }

}  // namespace spmd::dist::ep
