// parallelize(): the strategies in TorchTitan's order, each a few lines,
// because each lives in its own file of parallel/.
#include "train/parallelize.h"

#include "autograd/nn/checkpoint_wrapper.h"
#include "parallel/tensor_parallel/plan.h"

namespace spmd::train {

void check_supported(const ParallelConfig& p) {
  SPMD_CHECK(p.pp == 1, "parallel.pp = ", p.pp,
             ": spmd-train does not build pipeline stages (parallel/pipeline and "
             "examples/07_pipeline do); set parallel.pp = 1");
  SPMD_CHECK(p.cp == 1, "parallel.cp = ", p.cp, ": context parallelism is not in spmd-train");
  SPMD_CHECK(p.ep == 1, "parallel.ep = ", p.ep, ": expert parallelism is not in spmd-train");
}

dist::DeviceMesh build_mesh(const std::shared_ptr<dist::ProcessGroup>& world,
                            const ParallelConfig& p) {
  check_supported(p);
  return dist::DeviceMesh(world, {p.dp_replicate, p.dp_shard, p.tp},
                          {"dp_replicate", "dp_shard", "tp"});
}

Parallelized parallelize(std::shared_ptr<nn::Transformer> model, dist::DeviceMesh& mesh,
                         const TrainConfig& config) {
  const ParallelConfig& p = config.parallel;
  Parallelized out;
  out.model = model;
  out.tp = mesh.group_ptr("tp");
  dist::DeviceMesh dp = mesh.flatten({"dp_replicate", "dp_shard"}, "dp");
  out.dp = dp.group_ptr("dp");
  out.dp_rank = dp.coordinate()[0];
  out.dp_size = dp.size();

  // 1. Tensor (and sequence) parallel: every block's projections split over tp.
  if (p.tp > 1) dist::tp::parallelize_transformer(*model, mesh["tp"], p.sequence_parallel);

  // 2. Activation checkpointing: each block recomputed in backward.
  if (config.training.activation_checkpointing == "full")
    nn::apply_activation_checkpointing(*model->layers);

  // 3. Data parallel: FSDP (HSDP) when dp_shard > 1, else DDP over replicas.
  if (p.dp_shard > 1) {
    dist::FsdpOptions o;
    o.shard_axis = "dp_shard";
    if (p.dp_replicate > 1) o.replicate_axis = "dp_replicate";
    o.reshard_after_forward = p.fsdp_reshard_after_forward;
    for (size_t i = 0; i < model->layers->size(); ++i)
      dist::fully_shard(model->layers->at(i), mesh, o);
    out.fsdp_root = dist::fully_shard(model, mesh, o);
  } else if (p.dp_replicate > 1) {
    out.ddp = std::make_shared<dist::DistributedDataParallel>(model, mesh.group_ptr("dp_replicate"));
  }
  return out;
}

}  // namespace spmd::train
