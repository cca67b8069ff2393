// parallelize(): the strategies in TorchTitan's order, each a few lines,
// because each lives in its own file of parallel/.
#include "train/parallelize.h"

#include "autograd/nn/checkpoint_wrapper.h"
#include "autograd/nn/moe.h"
#include "autograd/nn_functional.h"
#include "autograd/tensor_ops.h"
#include "parallel/context_parallel/context_parallel.h"
#include "parallel/tensor_parallel/loss.h"
#include "parallel/tensor_parallel/plan.h"

namespace spmd::train {

void check_supported(const ParallelConfig& p) {
  SPMD_CHECK(p.ep == 1 || p.dp_shard == 1 || (p.dp_shard * p.cp) % p.ep == 0, "parallel: ep ", p.ep,
             " with dp_shard ", p.dp_shard, " x cp ", p.cp,
             ": under FSDP the expert ranks come from dp_shard x cp, so ep must divide it");
}

namespace {

// FSDP per pipeline stage (TorchTitan's): each block of the stage a unit,
// the stage (as_module()) the root over them, which holds the embeddings or
// the norm and head. A middle stage has no parameters but its blocks', so
// each of its blocks is a root of its own. The executor's backwards only
// accumulate the units' full gradients (sync off for every microbatch); the
// trainer reduce-scatters them once per step, after the last backward, every
// unit's issued before the first wait (reduce_stage_gradients). PyTorch's
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

}  // namespace

Tensor lm_loss(const Tensor& logits, const Tensor& targets, dist::ProcessGroup& tp) {
  return tp.size() > 1 ? dist::tp::vocab_parallel_cross_entropy(logits, targets, tp)
                       : cross_entropy(logits, targets);
}

dist::DeviceMesh build_mesh(const std::shared_ptr<dist::ProcessGroup>& world,
                            const ParallelConfig& p) {
  check_supported(p);
  return dist::DeviceMesh(world, {p.pp, p.dp_replicate, p.dp_shard, p.cp, p.tp},
                          {"pp", "dp_replicate", "dp_shard", "cp", "tp"});
}

Parallelized parallelize(std::shared_ptr<nn::Transformer> model, dist::DeviceMesh& mesh,
                         const TrainConfig& config) {
  const ParallelConfig& p = config.parallel;
  Parallelized out;
  out.model = model;
  out.tp = mesh.group_ptr("tp");
  out.cp = mesh.group_ptr("cp");
  dist::DeviceMesh dp = mesh.flatten({"dp_replicate", "dp_shard"}, "dp");
  out.dp = dp.group_ptr("dp");
  out.dp_rank = dp.coordinate()[0];
  out.dp_size = dp.size();
  out.loss_group = mesh.flatten({"dp_replicate", "dp_shard", "cp"}, "dp_cp").group_ptr("dp_cp");

  // 0. Pipeline: this rank's stage of the model, run by an executor.
  if (p.pp > 1) {
    out.pp = mesh.group_ptr("pp");
    for (dist::pp::TransformerStage& st : dist::pp::split_model_interleaved(
             model, out.pp->rank(), out.pp->size(), int(p.pp_stages_per_rank)))
      out.stages.push_back(std::make_shared<dist::pp::TransformerStage>(std::move(st)));
    out.stage_replicas = std::make_shared<dist::DeviceMesh>(
        mesh.flatten({"dp_replicate", "dp_shard", "cp", "tp"}, "stage_replicas"));
  }

  // 1. Tensor (and sequence) parallel: every block's projections split over tp.
  if (p.tp > 1) dist::tp::parallelize_transformer(*model, mesh["tp"], p.sequence_parallel);

  // 2. Context parallel: ring attention over cp, global positions.
  if (p.cp > 1) dist::cp::parallelize_context(*model, out.cp);

  // 2b. Expert parallel: each MoE's experts split over ep ranks of the data
  //     axes (x cp: every rank of the batch's tokens), laid out {rest, ep}
  //     so that ep is innermost: within dp_shard (x cp) under FSDP, as
  //     TorchTitan's, else within dp_replicate.
  if (p.ep > 1) {
    const std::string from = p.cp > 1 ? "dp_cp" : "dp";
    out.ep_mesh = std::make_shared<dist::DeviceMesh>(
        mesh.group_ptr(from), std::vector<int64_t>{mesh.size(from) / p.ep, p.ep},
        std::vector<std::string>{"dp", "ep"});
    out.ep = std::make_shared<dist::ep::ExpertParallelism>(
        dist::ep::parallelize_experts(*model, *out.ep_mesh));
  }

  // 3. Activation checkpointing: each block recomputed in backward.
  if (config.training.activation_checkpointing == "full")
    nn::apply_activation_checkpointing(*model->layers);

  // 4. Data parallel: FSDP (HSDP) when dp_shard > 1, else DDP over replicas;
  //    cp ranks average their gradients with them.
  if (p.dp_shard > 1) {
    dist::FsdpOptions o;
    o.shard_axis = p.cp > 1 ? "dp_shard_cp" : "dp_shard";
    if (p.dp_replicate > 1) o.replicate_axis = "dp_replicate";
    o.reshard_after_forward = p.fsdp_reshard_after_forward;
    // The experts differ between the dp_shard ranks: FSDP leaves them to
    // ep::sync_expert_gradients and shards the dense parameters only.
    for (const Tensor& t : model->parameters())
      if (dist::ep::is_expert_shard(t)) o.ignored_params.push_back(t);
    if (p.pp > 1 || p.cp > 1)
      out.fsdp_mesh = std::make_shared<dist::DeviceMesh>(fsdp_mesh(mesh, p));
    dist::DeviceMesh& on = out.fsdp_mesh ? *out.fsdp_mesh : mesh;
    if (p.pp > 1) {
      out.stage_units = shard_stages(
          out.stages, on, o, dist::pp::splits_backward(dist::pp::parse_schedule(p.pp_schedule)));
    } else {
      for (size_t i = 0; i < model->layers->size(); ++i)
        dist::fully_shard(model->layers->at(i), on, o);
      out.fsdp_root = dist::fully_shard(model, on, o);
    }
    if (out.fsdp_mesh) {
      out.groups.push_back(on.group_ptr(o.shard_axis));
      if (p.dp_replicate > 1) out.groups.push_back(on.group_ptr(o.replicate_axis));
    }
  } else if (p.ep > 1) {
    // ep::sync_gradients after the step's backwards: the experts' gradients
    // are not DDP's average.
  } else if (p.pp > 1 && p.ep == 1) {
    // The stage's gradients are averaged over dp_replicate (x cp) after each
    // step (pipeline_train.h): DDP's hooks would wait for the other stages' too.
    const std::string axis = p.cp > 1 ? "dp_replicate_cp" : "dp_replicate";
    if (p.cp > 1) mesh.flatten({"dp_replicate", "cp"}, axis);
    out.stage_average = mesh.group_ptr(axis);
  } else if (p.dp_replicate > 1 || p.cp > 1) {
    const std::string axis = p.cp > 1 ? "dp_replicate_cp" : "dp_replicate";
    if (p.cp > 1) mesh.flatten({"dp_replicate", "cp"}, axis);
    out.ddp = std::make_shared<dist::DistributedDataParallel>(model, mesh.group_ptr(axis));
  }
  if (p.pp > 1) {
    const int m = int(p.pp_microbatches == 0 ? p.pp : p.pp_microbatches);
    std::vector<dist::pp::TransformerStage*> mine;
    for (const auto& st : out.stages) mine.push_back(st.get());
    out.pipeline = std::make_shared<dist::pp::PipelineExecutor>(
        mine, *out.pp, dist::pp::parse_schedule(p.pp_schedule), m);
    // Under sequence parallelism the stages trade their tp rank's share of the sequence.
    if (p.sequence_parallel) out.pipeline->activation_sequence_split = p.tp;
    // Each stage's blocks as a module: for its MoE blocks' balancing loss,
    // which each stage adds per microbatch, and ep::sync_gradients.
    if (config.model.n_experts > 0)
      for (const auto& st : out.stages) st->as_module();
    if (config.model.n_experts > 0 && config.model.moe_aux_coef > 0) {
      const double coef = config.model.moe_aux_coef;
      out.pipeline->stage_objective = [coef](dist::pp::TransformerStage& st) {
        return mul(nn::moe_aux_loss(*st.as_module()), coef);
      };
    }
    std::shared_ptr<dist::ProcessGroup> tp = out.tp;
    out.pipeline->loss_fn = [tp](const Tensor& logits, const Tensor& y) {
      return lm_loss(logits, y, *tp);
    };
  }
  if (out.ep) out.groups.push_back(out.ep->ep);
  for (const char* axis : {"pp", "dp_replicate", "dp_shard", "cp", "tp", "dp", "dp_cp",
                           "dp_shard_cp", "dp_replicate_cp"})
    if (mesh.has_axis(axis)) out.groups.push_back(mesh.group_ptr(axis));
  return out;
}

void reduce_stage_gradients(const Parallelized& p) {
  std::vector<dist::FsdpModule*> units;
  for (const auto& u : p.stage_units) units.push_back(u.get());
  dist::FsdpModule::reduce_gradients(units);
}

std::vector<std::pair<std::string, Tensor>> Parallelized::named_parameters() const {
  if (!stages.empty()) {
    std::vector<std::pair<std::string, Tensor>> all;
    for (const auto& st : stages)
      for (auto& named : st->named_parameters()) all.push_back(std::move(named));
    return all;
  }
  return model->named_parameters();  // under DDP the same tensors, which it names "module.*"
}

}  // namespace spmd::train
