// The layout of a training job: the world's ranks as a mesh of the config's
// parallel dims, and the strategies applied to a model in TorchTitan's order
// (DESIGN.md, "Composing them"):
//
//   tensor (and sequence) parallel on "tp"  ->  context parallel on "cp"
//   ->  activation checkpointing  ->  FSDP on "dp_shard" (HSDP with
//   "dp_replicate")  or  DDP on "dp_replicate"
//
// With context parallelism the cp ranks hold different tokens of the same
// sequences, so their gradients are averaged too: FSDP shards over
// dp_shard x cp together (TorchTitan's dp_shard_cp, one dim of fsdp_mesh;
// HSDP replicates those shards over dp_replicate), DDP averages over
// dp_replicate x cp.
//
// Each step only reads and writes the model's parameters and their
// placements, so any subset composes; the model code knows none of it.
// Mesh axes, outermost first: dp_replicate, dp_shard, cp, tp (tp innermost,
// so its ranks are neighbours). The data is sharded over the dp axes only:
// the ranks of one tp or cp group see the same sequences (cp ranks then keep
// their chunks of each).
//
// Pipeline parallelism is the outermost axis, "pp", and the first step: each
// rank keeps the stage at its pp coordinate (or, interleaved, its
// pp_stages_per_rank virtual stages; parallel/pipeline), runs them through
// a PipelineExecutor, and their gradients are averaged over dp_replicate
// once per step (dist::average_gradients; train/pipeline_train.h has the
// rest of a pipeline's step). It combines with dp_replicate, tp
// (each stage's blocks split over its tp ranks, the last stage's loss
// vocabulary-parallel), activation checkpointing and dp_shard: FSDP per
// stage, on the mesh of every axis but pp (fsdp_mesh), its blocks the
// units and the stage's module the root; the executor's backwards
// accumulate the units' full gradients over the microbatches (any
// schedule, ZB-H1's deferred weight passes included), reduce-scattered
// into the shards' once per step (reduce_stage_gradients). With cp the
// stages run on the cp-local sequence (the trainer cuts it before the
// executor) and their gradients are averaged over dp_replicate x cp
// (stage_average), or FSDP shards over dp_shard x cp.
// With sequence parallelism the stages trade their tp rank's share of the
// sequence (the executor's activation_sequence_split).
//
// Expert parallelism (parallel.ep > 1) splits the experts of every MoE
// block over ep ranks borrowed from dp_replicate: a mesh {dp_replicate / ep,
// ep} over the same ranks, whose "ep" lines trade tokens by all_to_all
// (parallel/expert_parallel); the gradients are then synchronized by
// ep::sync_gradients after the step's backwards, in place of DDP. Under
// FSDP (dp_shard > 1) the ep ranks come from dp_shard instead, as
// TorchTitan's (the mesh {dp / ep, ep} over every data rank, ep innermost):
// FSDP (HSDP) shards the dense parameters over dp_shard and leaves
// the experts out (ignored_params), whose gradients ep::sync_expert_gradients
// then averages. With cp the ep mesh is laid over that axis x cp; beside
// tp each MoE block runs whole on every tp rank (tp splits the dense ones);
// under pp the ep lines lie within a stage's ranks, and ep's averages run
// stage by stage.
//
// Not here: expert parallelism under FSDP whose ep does not divide
// dp_shard x cp (check_supported() refuses it, naming the dims).
#pragma once

#include <memory>

#include "autograd/nn/transformer.h"
#include "parallel/ddp/ddp.h"
#include "parallel/device_mesh.h"
#include "parallel/expert_parallel/expert_parallel.h"
#include "parallel/fsdp/fully_shard.h"
#include "parallel/pipeline/executor.h"
#include "train/config.h"

namespace spmd::train {

// What a parallelized model is called through, and the groups the loop needs.
struct Parallelized {
  std::shared_ptr<nn::Transformer> model;              // the model (its parameters: pieces)
  std::shared_ptr<dist::DistributedDataParallel> ddp;  // set when DDP wraps it
  std::shared_ptr<dist::FsdpModule> fsdp_root;         // set under FSDP/HSDP
  std::shared_ptr<dist::ProcessGroup> tp;              // the tp group (size 1 without TP)
  std::shared_ptr<dist::ProcessGroup> cp;              // the cp group (size 1 without CP)
  std::shared_ptr<dist::ProcessGroup> dp;              // every dp rank: replicate x shard
  std::shared_ptr<dist::ProcessGroup> loss_group;      // the ranks whose losses make the batch's
  int64_t dp_rank = 0, dp_size = 1;                    // this rank's data shard
  std::vector<std::shared_ptr<dist::ProcessGroup>> groups;  // every group a strategy uses

  // Under pipeline parallelism (pp > 1): this rank's stages (one, or
  // pp_stages_per_rank interleaved), their executor, the pp group, and the
  // 1-D mesh of the ranks that hold copies of these stages (every axis but
  // pp), which a checkpoint writes once per stage.
  std::vector<std::shared_ptr<dist::pp::TransformerStage>> stages;
  std::shared_ptr<dist::pp::PipelineExecutor> pipeline;
  std::shared_ptr<dist::ProcessGroup> pp;
  std::shared_ptr<dist::DeviceMesh> stage_replicas;
  // Under FSDP with pp or cp: the mesh of every axis but pp (over the
  // ranks that hold this stage, or all), dp_shard and cp merged into one
  // dim, dp_shard_cp, under cp; FSDP's shards are placed on it. Null under
  // FSDP on the world's mesh.
  std::shared_ptr<dist::DeviceMesh> fsdp_mesh;
  // Under pp with dp_shard: this rank's stages' FSDP units, in the order
  // they were made (the same on every rank of a stage). Their gradient
  // sync is off: reduce_stage_gradients() reduces them after the step's
  // backwards.
  std::vector<std::shared_ptr<dist::FsdpModule>> stage_units;
  // Without dp_shard: the group the stages' gradients are averaged over
  // after each step (dp_replicate, or dp_replicate x cp); under FSDP null,
  // its reduce-scatters having averaged them.
  std::shared_ptr<dist::ProcessGroup> stage_average;

  // Under expert parallelism (ep > 1): the {dp, ep} mesh and what
  // parallelize_experts set up.
  std::shared_ptr<dist::DeviceMesh> ep_mesh;
  std::shared_ptr<dist::ep::ExpertParallelism> ep;

  // The parameters this rank trains, with the model's names: the stage's
  // under pp, else the (parallelized) model's.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;

  // The module a forward goes through.
  nn::Module& module() { return ddp ? static_cast<nn::Module&>(*ddp) : *model; }
};

// The mean cross-entropy of logits against targets: the logits (b, T, V),
// or this rank's (b, T, V/tp) when tensor parallelism split the head, whose
// loss is then vocabulary-parallel over `tp`. Every loss the trainer takes
// (a step's, a pipeline's last stage's, the held-out one) goes through it.
Tensor lm_loss(const Tensor& logits, const Tensor& targets, dist::ProcessGroup& tp);

// Refuses a layout this trainer does not build (ep under FSDP not
// dividing dp_shard x cp).
void check_supported(const ParallelConfig& p);

// The mesh of the parallel dims. Collective over the world.
dist::DeviceMesh build_mesh(const std::shared_ptr<dist::ProcessGroup>& world,
                            const ParallelConfig& p);

// Applies the strategies the config asks for, in order. Collective.
Parallelized parallelize(std::shared_ptr<nn::Transformer> model, dist::DeviceMesh& mesh,
                         const TrainConfig& config);

// The stages' FSDP gradients of the step's backwards, reduce-scattered into
// the shards' (all issued, then waited for; nothing without stage_units). Collective
// over each stage's dp_shard (and dp_replicate) ranks.
void reduce_stage_gradients(const Parallelized& p);

}  // namespace spmd::train
