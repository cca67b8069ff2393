// parallelize_experts: check every MoE, then shard its stacked experts and
// install the dispatcher; sync_gradients: the two averages of the header.
#include "parallel/expert_parallel/expert_parallel.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "autograd/nn/moe.h"
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

// Averages the gradients of `params` over g (null: no one to average with)
// after scaling them by `scale`, as one flat buffer: one all_reduce.
void average(const std::vector<Tensor>& params, ProcessGroup* g, double scale) {
  if (params.empty()) return;
  std::vector<Tensor> flat_grads;
  for (const Tensor& p : params) flat_grads.push_back(ops::reshape(p.grad(), {p.numel()}));
  Tensor flat = ops::cat(flat_grads, 0);
  const int ranks = g ? g->size() : 1;
  ops::mul_(flat, scale / double(ranks));
  if (ranks > 1) g->wait(g->all_reduce(flat), OpType::kAllReduce);
  int64_t offset = 0;
  for (const Tensor& p : params) {
    Tensor(p).set_grad(ops::clone(ops::view(ops::narrow(flat, 0, offset, p.numel()), p.shape())));
    offset += p.numel();
  }
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

void sync_gradients(nn::Module& model, const ExpertParallelism& g) {
  std::vector<Tensor> dense, experts;
  for (const Tensor& p : model.parameters()) {
    if (!p.requires_grad()) continue;
    if (!p.grad().defined()) Tensor(p).set_grad(ops::zeros_like(p));
    (is_expert_shard(p) ? experts : dense).push_back(p);
  }
  average(dense, g.batch.get(), 1.0);                        // the mean over dp x ep
  average(experts, g.dp.get(), 1.0 / double(g.ep->size()));  // a sum over ep, a mean over dp
}

}  // namespace spmd::dist::ep
