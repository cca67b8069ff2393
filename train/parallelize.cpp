// parallelize(): the strategies in TorchTitan's order, each a short function,
// because each lives in its own file of parallel/. Each takes the mesh and
// the model (or its stages) and returns the part of Parallelized it set up.
#include "train/parallelize.h"

#include "autograd/nn/checkpoint_wrapper.h"
#include "autograd/nn/moe.h"
#include "autograd/nn_functional.h"
#include "autograd/tensor_ops.h"
#include "parallel/context_parallel/context_parallel.h"
#include "parallel/materialize.h"
#include "parallel/tensor_parallel/loss.h"
#include "parallel/tensor_parallel/plan.h"
#include "tensor/ops.h"

namespace spmd::train {
namespace {

// The steps, in the order parallelize() takes them (defined below).
Parallelized::Groups data_groups(dist::DeviceMesh& mesh);
Parallelized::Pipeline split_pipeline(const std::shared_ptr<nn::Transformer>& model,
                                      dist::DeviceMesh& mesh, const ParallelConfig& p);
Parallelized::Experts parallelize_experts(nn::Transformer& model, dist::DeviceMesh& mesh,
                                          const ParallelConfig& p);
Parallelized::DataParallel apply_fsdp(const std::shared_ptr<nn::Transformer>& model,
                                      const Parallelized::Pipeline& pipeline,
                                      dist::DeviceMesh& mesh, const TrainConfig& config);
dist::DeviceMesh fsdp_mesh(dist::DeviceMesh& mesh, const ParallelConfig& p);
void materialize_pieces(nn::Transformer& model, const Parallelized::Pipeline& pipeline,
                        const Device& device);
Parallelized::DataParallel replicate_data(const std::shared_ptr<nn::Transformer>& model,
                                          const Parallelized::Pipeline& pipeline,
                                          dist::DeviceMesh& mesh, const ParallelConfig& p);
std::vector<std::shared_ptr<dist::FsdpModule>> shard_stages(
    const std::vector<std::shared_ptr<dist::pp::TransformerStage>>& stages,
    const dist::DeviceMesh& mesh, const dist::FsdpOptions& o, bool split_backward);
void build_schedule(Parallelized::Pipeline& pipeline, const std::shared_ptr<dist::ProcessGroup>& tp,
                    const TrainConfig& config);
void collect_groups(Parallelized::Groups& groups, const Parallelized::DataParallel& data,
                    const Parallelized::Experts& experts, const dist::DeviceMesh& mesh,
                    const ParallelConfig& p);

}  // namespace

Parallelized parallelize(std::shared_ptr<nn::Transformer> model, dist::DeviceMesh& mesh,
                         const TrainConfig& config, const Device& device) {
  const ParallelConfig& p = config.parallel;
  Parallelized::Groups groups = data_groups(mesh);

  // 0. Pipeline: this rank's stages of the model; every step below applies to them.
  Parallelized::Pipeline pipeline;
  if (p.pp > 1) pipeline = split_pipeline(model, mesh, p);

  // 1. Tensor (and sequence) parallel: every block's projections split over tp.
  if (p.tp > 1) dist::tp::parallelize_transformer(*model, mesh["tp"], p.sequence_parallel);

  // 2. Context parallel: ring attention over cp, global positions.
  if (p.cp > 1) dist::cp::parallelize_context(*model, groups.cp);

  // 3. Expert parallel: each MoE's experts split over ep ranks of the data axes.
  Parallelized::Experts experts;
  if (p.ep > 1) experts = parallelize_experts(*model, mesh, p);

  // 4. Activation checkpointing: each block (or every k-th) recomputed in backward.
  if (config.training.activation_checkpointing != "none")
    nn::apply_activation_checkpointing(*model->layers, checkpoint_options(config.training));

  // 5. Fully sharded data parallel: FSDP (HSDP) when dp_shard > 1.
  Parallelized::DataParallel data;
  if (p.dp_shard > 1) data = apply_fsdp(model, pipeline, mesh, config);

  // 6. Materialize: this rank's pieces, and only those, get bytes and values.
  materialize_pieces(*model, pipeline, device);

  // 7. Replicated data parallel: DDP over the replicas, without FSDP.
  if (p.dp_shard == 1) data = replicate_data(model, pipeline, mesh, p);

  // 8. The pipeline's schedule, over the stages as the steps above left them.
  if (p.pp > 1) build_schedule(pipeline, groups.tp, config);

  collect_groups(groups, data, experts, mesh, p);
  return Parallelized(std::move(model), std::move(groups), std::move(pipeline), std::move(data),
                      std::move(experts), config);
}

void check_supported(const ParallelConfig& p) {
  SPMD_CHECK(p.ep == 1 || p.dp_shard == 1 || (p.dp_shard * p.cp) % p.ep == 0, "parallel: ep ", p.ep,
             " with dp_shard ", p.dp_shard, " x cp ", p.cp,
             ": under FSDP the expert ranks come from dp_shard x cp, so ep must divide it");
}

dist::DeviceMesh build_mesh(const std::shared_ptr<dist::ProcessGroup>& world,
                            const ParallelConfig& p) {
  check_supported(p);
  return dist::DeviceMesh(world, {p.pp, p.dp_replicate, p.dp_shard, p.cp, p.tp},
                          {"pp", "dp_replicate", "dp_shard", "cp", "tp"});
}

Tensor lm_loss(const Tensor& logits, const Tensor& targets, dist::ProcessGroup& tp) {
  return tp.size() > 1 ? dist::tp::vocab_parallel_cross_entropy(logits, targets, tp)
                       : cross_entropy(logits, targets);
}

double reduce_scalar(dist::ProcessGroup& group, double value, dist::ReduceOp op) {
  if (group.size() == 1) return value;
  Tensor t = ops::scalar_tensor(value, {DType::kF64});
  group.wait(group.all_reduce(t, op), dist::OpType::kAllReduce);
  return t.item<double>();
}

namespace {

// The groups every layout has: tp and cp (size 1 when off), this rank's
// place among the dp ranks (dp_replicate x dp_shard), over which the data is
// dealt, and the dp x cp ranks whose losses make the batch's.
Parallelized::Groups data_groups(dist::DeviceMesh& mesh) {
  Parallelized::Groups groups;
  groups.tp = mesh.group_ptr("tp");
  groups.cp = mesh.group_ptr("cp");
  dist::DeviceMesh dp = mesh.flatten({"dp_replicate", "dp_shard"}, "dp");
  groups.dp_rank = dp.coordinate()[0];
  groups.dp_size = dp.size();
  groups.batch = mesh.flatten({"dp_replicate", "dp_shard", "cp"}, "dp_cp").group_ptr("dp_cp");
  return groups;
}

// The stages at this rank's pp coordinate (one, or pp_stages_per_rank
// interleaved), and the ranks that hold copies of them (every axis but pp).
Parallelized::Pipeline split_pipeline(const std::shared_ptr<nn::Transformer>& model,
                                      dist::DeviceMesh& mesh, const ParallelConfig& p) {
  Parallelized::Pipeline pipeline;
  pipeline.pp = mesh.group_ptr("pp");
  for (dist::pp::TransformerStage& st : dist::pp::split_model_interleaved(
           model, pipeline.pp->rank(), pipeline.pp->size(), int(p.pp_stages_per_rank)))
    pipeline.stages.push_back(std::make_shared<dist::pp::TransformerStage>(std::move(st)));
  pipeline.stage_replicas = std::make_shared<dist::DeviceMesh>(
      mesh.flatten({"dp_replicate", "dp_shard", "cp", "tp"}, "stage_replicas"));
  return pipeline;
}

// Each MoE's experts split over ep ranks of the data axes (x cp: every rank
// of the batch's tokens), laid out {rest, ep} so that ep is innermost:
// within dp_shard (x cp) under FSDP, as TorchTitan's, else within
// dp_replicate. The experts' gradients are then averaged after the step's
// backwards (Parallelized::sync_gradients), not by DDP or FSDP.
Parallelized::Experts parallelize_experts(nn::Transformer& model, dist::DeviceMesh& mesh,
                                          const ParallelConfig& p) {
  const std::string from = p.cp > 1 ? "dp_cp" : "dp";
  Parallelized::Experts experts;
  experts.mesh = std::make_shared<dist::DeviceMesh>(
      mesh.group_ptr(from), std::vector<int64_t>{mesh.size(from) / p.ep, p.ep},
      std::vector<std::string>{"dp", "ep"});
  experts.ep = std::make_shared<dist::ep::ExpertParallelism>(
      dist::ep::parallelize_experts(model, *experts.mesh));
  return experts;
}

// Without FSDP, the replicas' gradients averaged, with the cp ranks': by
// DDP's hooks; a pipeline's stages by hand once per step (DDP's hooks would
// wait for gradients only other stages make); under expert parallelism by
// ep::sync_gradients (the experts' gradients are not DDP's average).
Parallelized::DataParallel replicate_data(const std::shared_ptr<nn::Transformer>& model,
                                          const Parallelized::Pipeline& pipeline,
                                          dist::DeviceMesh& mesh, const ParallelConfig& p) {
  Parallelized::DataParallel data;
  if (p.ep > 1) return data;
  if (!pipeline.on() && p.dp_replicate == 1 && p.cp == 1)
    return data;  // one copy: nothing to average
  const std::string axis = p.cp > 1 ? "dp_replicate_cp" : "dp_replicate";
  if (p.cp > 1) mesh.flatten({"dp_replicate", "cp"}, axis);
  if (pipeline.on()) {
    data.stage_average = mesh.group_ptr(axis);
  } else {
    data.ddp = std::make_shared<dist::DistributedDataParallel>(model, mesh.group_ptr(axis));
  }
  return data;
}

// FSDP over dp_shard (x cp), HSDP when dp_replicate > 1 too (the replicas'
// gradients averaged, with the cp ranks', by its reduce-scatters): each block a
// unit and the model the root, or, under pp, each stage sharded on its own
// (shard_stages). The experts differ between the dp_shard ranks: FSDP
// leaves them to ep's average and shards the dense parameters only. With
// training.mixed_precision = "bf16" the units gather bf16 parameters and
// reduce-scatter f32 gradients into the f32 shards (FSDP2's
// MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=f32)).
Parallelized::DataParallel apply_fsdp(const std::shared_ptr<nn::Transformer>& model,
                                      const Parallelized::Pipeline& pipeline,
                                      dist::DeviceMesh& mesh, const TrainConfig& config) {
  const ParallelConfig& p = config.parallel;
  dist::FsdpOptions o;
  if (config.training.mixed_precision == "bf16")
    o.mixed_precision = {.param_dtype = DType::kBF16, .reduce_dtype = DType::kF32};
  o.shard_axis = p.cp > 1 ? "dp_shard_cp" : "dp_shard";
  if (p.dp_replicate > 1) o.replicate_axis = "dp_replicate";
  o.reshard_after_forward = p.fsdp_reshard_after_forward;
  for (const Tensor& t : model->parameters())
    if (dist::ep::is_expert_shard(t)) o.ignored_params.push_back(t);
  Parallelized::DataParallel data;
  if (p.pp > 1 || p.cp > 1) data.fsdp_mesh = std::make_shared<dist::DeviceMesh>(fsdp_mesh(mesh, p));
  dist::DeviceMesh& on = data.fsdp_mesh ? *data.fsdp_mesh : mesh;
  if (pipeline.on()) {
    const bool split_backward = dist::pp::splits_backward(dist::pp::parse_schedule(p.pp_schedule));
    data.stage_units = shard_stages(pipeline.stages, on, o, split_backward);
  } else {
    for (size_t i = 0; i < model->layers->size(); ++i)
      dist::fully_shard(model->layers->at(i), on, o);
    data.fsdp_root = dist::fully_shard(model, on, o);
  }
  return data;
}

// The mesh FSDP places its shards on under pp or cp: every axis but pp,
// over the ranks of one stage (all of them without pp), so a shard's
// placements name only ranks that hold it. With cp, dp_shard and cp are
// one dim, dp_shard_cp, the shards cut along it: the two are neighbours in
// the grid, so merging them moves no rank, and HSDP's dp_replicate stays a
// dim of its own beside it.
dist::DeviceMesh fsdp_mesh(dist::DeviceMesh& mesh, const ParallelConfig& p) {
  const auto ranks = mesh.flatten({"dp_replicate", "dp_shard", "cp", "tp"}, "stage_replicas")
                         .group_ptr("stage_replicas");
  if (p.cp == 1)
    return dist::DeviceMesh(ranks, {p.dp_replicate, p.dp_shard, p.cp, p.tp},
                            {"dp_replicate", "dp_shard", "cp", "tp"});
  return dist::DeviceMesh(ranks, {p.dp_replicate, p.dp_shard * p.cp, p.tp},
                          {"dp_replicate", "dp_shard_cp", "tp"});
}

// The parameters this rank trains (its stages' under pp, else the model's,
// each a piece or whole) given bytes on `device` and the values the
// one-process model holds there; the parameters it does not hold stay on
// meta. The buffers (RoPE tables, built on the CPU) move to the device.
// On the meta device itself (a dry run, train/dry_run.h) every piece stays
// as it is, shapes only.
void materialize_pieces(nn::Transformer& model, const Parallelized::Pipeline& pipeline,
                        const Device& device) {
  if (device.is_meta()) {
    model.buffers_to(device);
    return;
  }
  std::vector<std::pair<std::string, Tensor>> named;
  if (pipeline.on()) {
    for (const auto& st : pipeline.stages)
      for (auto& piece : st->named_parameters()) named.push_back(std::move(piece));
  } else {
    named = model.named_parameters();
  }
  dist::materialize(
      named, device,
      [&model](const std::string& name, const Tensor& box, const Shape& whole,
               const Shape& offset) { model.init_parameter(name, box, whole, offset); });
  model.buffers_to(device);
}

// FSDP per pipeline stage (TorchTitan's): each block of the stage a unit,
// the stage (as_module()) the root over them, which holds the embeddings or
// the norm and head. A middle stage has no parameters but its blocks', so
// each of its blocks is a root of its own. The executor's backwards only
// accumulate the units' full gradients (sync off for every microbatch); the
// trainer reduce-scatters them once per step, after the last backward, every
// unit's issued before the first wait (sync_stage_gradients). PyTorch's
// pipelining instead turns sync on for the last microbatch, whose backward
// then overlaps the reductions; here they follow the step's compute. Under
// ZB-H1 a weight pass runs after its microbatch's backward and accumulates
// into the gathered parameters' gradients, so the units then stay gathered
// for the whole step (neither resharded after forward nor after backward).
std::vector<std::shared_ptr<dist::FsdpModule>> shard_stages(
    const std::vector<std::shared_ptr<dist::pp::TransformerStage>>& stages,
    const dist::DeviceMesh& mesh, const dist::FsdpOptions& o, bool split_backward) {
  std::vector<std::shared_ptr<dist::FsdpModule>> units;
  for (const auto& st : stages) {
    const nn::Transformer& m = st->model();
    for (int64_t i = st->first_layer(); i < st->end_layer(); ++i)
      units.push_back(dist::fully_shard(m.layers->at(size_t(i)), mesh, o));
    if (st->is_first() || st->is_last())
      units.push_back(dist::fully_shard(st->as_module(), mesh, o));
  }
  for (const auto& u : units) {
    u->set_requires_gradient_sync(false, /*recurse=*/false);
    if (!split_backward) continue;
    u->set_reshard_after_forward(false);
    u->set_reshard_after_backward(false, /*recurse=*/false);
  }
  return units;
}

// The executor over this rank's stages, with parallel.pp_schedule over
// pp_microbatches (pp if 0). Under sequence parallelism the stages trade
// their tp rank's share of the sequence; the last stage's loss is lm_loss
// (vocabulary-parallel under tp); with experts each stage adds its MoE
// blocks' balancing loss per microbatch.
void build_schedule(Parallelized::Pipeline& pipeline, const std::shared_ptr<dist::ProcessGroup>& tp,
                    const TrainConfig& config) {
  const ParallelConfig& p = config.parallel;
  const int m = int(p.pp_microbatches == 0 ? p.pp : p.pp_microbatches);
  std::vector<dist::pp::TransformerStage*> mine;
  for (const auto& st : pipeline.stages) mine.push_back(st.get());
  pipeline.executor = std::make_shared<dist::pp::PipelineExecutor>(
      mine, *pipeline.pp, dist::pp::parse_schedule(p.pp_schedule), m);
  if (p.sequence_parallel) pipeline.executor->activation_sequence_split = p.tp;
  // Each stage's blocks as a module: for the balancing loss and ep's averages.
  if (config.model.n_experts > 0)
    for (const auto& st : pipeline.stages) st->as_module();
  if (config.model.n_experts > 0 && config.model.moe_aux_coef > 0) {
    const double coef = config.model.moe_aux_coef;
    pipeline.executor->stage_objective = [coef](dist::pp::TransformerStage& st) {
      return mul(nn::moe_aux_loss(*st.as_module()), coef);
    };
  }
  pipeline.executor->loss_fn = [tp](const Tensor& logits, const Tensor& y) {
    return lm_loss(logits, y, *tp);
  };
}

// Every group a strategy uses, for the loop's communication statistics:
// FSDP's own under pp or cp, ep's, and the mesh's axes.
void collect_groups(Parallelized::Groups& groups, const Parallelized::DataParallel& data,
                    const Parallelized::Experts& experts, const dist::DeviceMesh& mesh,
                    const ParallelConfig& p) {
  if (data.fsdp_mesh) {
    groups.all.push_back(data.fsdp_mesh->group_ptr(p.cp > 1 ? "dp_shard_cp" : "dp_shard"));
    if (p.dp_replicate > 1) groups.all.push_back(data.fsdp_mesh->group_ptr("dp_replicate"));
  }
  if (experts.ep) groups.all.push_back(experts.ep->ep);
  for (const char* axis : {"pp", "dp_replicate", "dp_shard", "cp", "tp", "dp", "dp_cp",
                           "dp_shard_cp", "dp_replicate_cp"})
    if (mesh.has_axis(axis)) groups.all.push_back(mesh.group_ptr(axis));
}

}  // namespace
}  // namespace spmd::train
