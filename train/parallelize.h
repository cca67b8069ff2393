// The layout of a training job: the world's ranks as a mesh of the config's
// parallel dims, the strategies applied to a model in TorchTitan's order
// (docs/train.md, "The layout"), and the step that trains the result.
//
//   pipeline split on "pp"  ->  tensor (and sequence) parallel on "tp"
//   ->  context parallel on "cp"  ->  expert parallel on "ep"
//   ->  activation checkpointing  ->  FSDP on "dp_shard" (HSDP with
//   "dp_replicate")  ->  materialize  ->  without FSDP, DDP on
//   "dp_replicate"  ->  the pipeline's schedule
//
// The model comes built on the meta device (shapes, no bytes): every step
// up to FSDP decides placements only, then each rank gives bytes to the
// pieces it holds and fills them with the values the one-process model has
// there (parallel/materialize.h), so no rank ever holds a parameter whole
// that a strategy split.
//
// Each step only reads and writes the model's parameters and their
// placements, so any subset composes; the model code knows none of it.
// Mesh axes, outermost first: pp, dp_replicate, dp_shard, cp, tp (tp
// innermost, so its ranks are neighbours). The data is sharded over the dp
// axes only: the ranks of one tp or cp group see the same sequences (cp
// ranks then keep their chunks of each).
//
// With context parallelism the cp ranks hold different tokens of the same
// sequences, so their gradients are averaged too: FSDP shards over
// dp_shard x cp together (TorchTitan's dp_shard_cp, one dim of the FSDP
// mesh; HSDP replicates those shards over dp_replicate), DDP averages over
// dp_replicate x cp.
//
// Pipeline parallelism is the outermost axis and the first step: each rank
// keeps the stage at its pp coordinate (or, interleaved, its
// pp_stages_per_rank virtual stages; parallel/pipeline), and every later
// step applies to those stages; the executor that runs them is built last,
// as TorchTitan builds its schedule after parallelizing the model parts.
// Its stages' gradients are averaged once per step, after the step's
// backwards, over dp_replicate (x cp); under FSDP each stage is sharded on
// its own, its blocks the units and the stage's module the root, and the
// units' full gradients, accumulated over the microbatches (any schedule,
// ZB-H1's deferred weight passes included), are reduce-scattered into the
// shards once per step (train/pipeline_train.h).
//
// Expert parallelism (parallel.ep > 1) splits the experts of every MoE
// block over ep ranks borrowed from the data axes (x cp): a mesh {rest, ep}
// whose "ep" lines trade tokens by all_to_all (parallel/expert_parallel).
// Under FSDP the ep ranks come from dp_shard (x cp), as TorchTitan's, and
// FSDP shards the dense parameters only (the experts are its
// ignored_params); without FSDP they come from dp_replicate and no DDP
// wraps the model. It comes before FSDP, as TorchTitan applies it beside
// tp, because FSDP must know which parameters are experts. Beside tp each
// MoE block runs whole on every tp rank; under pp the ep lines lie within
// a stage's ranks.
//
// Not here: expert parallelism under FSDP whose ep does not divide
// dp_shard x cp (check_supported() refuses it, naming the dims).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/data/text_dataset.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "parallel/ddp/ddp.h"
#include "parallel/device_mesh.h"
#include "parallel/expert_parallel/expert_parallel.h"
#include "parallel/fsdp/fully_shard.h"
#include "parallel/pipeline/executor.h"
#include "train/config.h"

namespace spmd::train {

// A model laid out by parallelize(), its optimizer, and the step that
// trains them. The training loop calls, each step:
//
//   zero_grad()  ->  forward_backward(x, y)  ->  sync_gradients()
//   ->  clip_grad_norm(max)  ->  batch_loss(loss)  ->  optimizer_step(lr)
//
// and never asks which strategies are on: each method does what the layout
// needs (train_step.cpp; the pipeline's share in pipeline_train.cpp). Every
// method that communicates is collective over the world: all ranks call it,
// in the same order.
class Parallelized {
 public:
  // What each step of parallelize() set up, strategy by strategy; a
  // strategy that is off leaves its part empty.
  struct Groups {
    std::shared_ptr<dist::ProcessGroup> tp, cp;  // size 1 when off
    std::shared_ptr<dist::ProcessGroup> batch;   // dp x cp: the ranks whose losses make the batch's
    int64_t dp_rank = 0, dp_size = 1;            // this rank's data shard
    std::vector<std::shared_ptr<dist::ProcessGroup>> all;  // every group a strategy uses
  };
  struct Pipeline {
    std::vector<std::shared_ptr<dist::pp::TransformerStage>> stages;  // this rank's
    std::shared_ptr<dist::pp::PipelineExecutor> executor;
    std::shared_ptr<dist::ProcessGroup> pp;
    // Every axis but pp: the ranks that hold copies of these stages, which
    // a checkpoint writes once per stage.
    std::shared_ptr<dist::DeviceMesh> stage_replicas;
    bool on() const { return !stages.empty(); }
  };
  struct DataParallel {
    std::shared_ptr<dist::DistributedDataParallel> ddp;  // DDP
    std::shared_ptr<dist::FsdpModule> fsdp_root;         // FSDP (HSDP) of the whole model
    // FSDP of pipeline stages: the units, in the order they were made (the
    // same on every rank of a stage), their gradient sync off.
    std::vector<std::shared_ptr<dist::FsdpModule>> stage_units;
    // A pipeline without FSDP: the group its gradients are averaged over
    // (dp_replicate, or dp_replicate x cp); null under expert parallelism.
    std::shared_ptr<dist::ProcessGroup> stage_average;
    // The mesh FSDP's shards are placed on under pp or cp (every axis but
    // pp, dp_shard and cp merged under cp); null: the world's mesh.
    std::shared_ptr<dist::DeviceMesh> fsdp_mesh;
    // Whether FSDP's reduce-scatters average the dense gradients.
    bool sharded() const { return fsdp_root || !stage_units.empty(); }
  };
  struct Experts {
    std::shared_ptr<dist::DeviceMesh> mesh;  // {dp, ep}
    std::shared_ptr<dist::ep::ExpertParallelism> ep;
  };

  // The optimizer is AdamW over named_parameters(), with config.optimizer's
  // hyperparameters; a step runs config.training.microbatches chunks.
  Parallelized(std::shared_ptr<nn::Transformer> model, Groups groups, Pipeline pipeline,
               DataParallel data, Experts experts, const TrainConfig& config);

  // --- The step, in the order the loop calls it.

  void zero_grad() { optimizer_->zero_grad(); }

  // One step's forwards and backwards over this rank's rows x, y (rows, T),
  // under bf16 autocast with training.mixed_precision = "bf16",
  // in training.microbatches chunks whose gradients accumulate (each a
  // pipeline step under pp). Returns this rank's loss: the mean over its
  // rows (under cp over its chunks of each), without the experts'
  // balancing loss, which the backwards include; under pp the last stage's,
  // on every stage. DDP's and FSDP's hooks reduce the gradients during the
  // last chunk's backward.
  double forward_backward(const Tensor& x, const Tensor& y);

  // The gradients the backwards left unsynchronized, averaged: a
  // pipeline's stages' (reduce-scattered under FSDP, else averaged over
  // their copies) and the experts'. After it every rank holds the
  // gradient of the global batch for its pieces.
  void sync_gradients();

  // The global gradient norm over every rank's pieces (split ones counted
  // once, the stages' summed over pp); with max_norm > 0 the gradients are
  // then scaled to at most max_norm (unless the norm is not finite: the
  // gradients are then left as they are). Returns the norm before clipping,
  // the same on every rank.
  double clip_grad_norm(double max_norm);

  // AdamW's step with learning rate lr.
  void optimizer_step(double lr);

  // The loss of the global batch: the mean of the ranks' forward_backward()
  // losses over dp (and cp), the same on every rank.
  double batch_loss(double loss) const;

  // The held-out loss: the first windows of the validation split, the same
  // on every rank (every tp, cp, pp and FSDP rank runs each forward).
  double val_loss(const data::TextDataset& ds, int64_t T, const Device& device);

  // --- What the loop reads.

  const nn::Transformer& model() const { return *model_; }
  // The parameters this rank trains, with the model's names: its stages'
  // under pp, else the (parallelized) model's.
  const std::vector<std::pair<std::string, Tensor>>& named_parameters() const { return named_; }
  optim::AdamW& optimizer() { return *optimizer_; }
  const optim::AdamW& optimizer() const { return *optimizer_; }
  int64_t dp_rank() const { return groups_.dp_rank; }
  int64_t dp_size() const { return groups_.dp_size; }
  // Every group a strategy uses, for their statistics.
  const std::vector<std::shared_ptr<dist::ProcessGroup>>& comm_groups() const {
    return groups_.all;
  }
  // The 1-D mesh of the ranks that hold the same parameters as this one,
  // whose rank 0 writes them in a checkpoint; null: every rank holds the
  // whole model (rank 0 writes what no strategy split).
  const dist::DeviceMesh* checkpoint_replicas() const { return pipeline_.stage_replicas.get(); }

 private:
  // This rank's tokens' loss (under cp its chunks of each sequence), and the
  // objective: the same plus, with experts, moe_aux_coef x the balancing loss.
  struct Losses {
    Tensor loss, objective;
  };
  Losses forward(Tensor x, Tensor y);
  // One chunk's forward and backward; its backward reduces the gradients
  // (DDP's and FSDP's hooks) when `sync`.
  Losses chunk_forward_backward(const Tensor& x, const Tensor& y, bool sync);
  void sync_expert_gradients();

  std::shared_ptr<nn::Transformer> model_;
  Groups groups_;
  Pipeline pipeline_;
  DataParallel data_;
  Experts experts_;
  std::vector<std::pair<std::string, Tensor>> named_;
  std::vector<Tensor> params_;  // named_'s tensors
  std::unique_ptr<optim::AdamW> optimizer_;
  int64_t microbatches_;  // training.microbatches
  // The objective's balancing term: moe_aux_coef x each MoE's loss (none
  // without experts).
  bool experts_in_model_;
  double moe_aux_coef_;
  // training.mixed_precision = "bf16": forwards (and the backwards they
  // record) under autocast; FSDP's units gather bf16 and reduce in f32.
  bool bf16_;
};

// The mean cross-entropy of logits against targets: the logits (b, T, V),
// or this rank's (b, T, V/tp) when tensor parallelism split the head, whose
// loss is then vocabulary-parallel over `tp`. Every loss the trainer takes
// (a step's, a pipeline's last stage's, the held-out one) goes through it.
Tensor lm_loss(const Tensor& logits, const Tensor& targets, dist::ProcessGroup& tp);

// `value` combined over `group` by `op`, in f64 (on a group of one, `value`):
// the step's scalars, its losses and norms. Collective over `group`.
double reduce_scalar(dist::ProcessGroup& group, double value,
                     dist::ReduceOp op = dist::ReduceOp::kSum);

// Refuses a layout this trainer does not build (ep under FSDP not
// dividing dp_shard x cp).
void check_supported(const ParallelConfig& p);

// The mesh of the parallel dims. Collective over the world.
dist::DeviceMesh build_mesh(const std::shared_ptr<dist::ProcessGroup>& world,
                            const ParallelConfig& p);

// Applies the strategies the config asks for, in order, and builds the
// optimizer over what this rank then trains. A model built on the meta
// device is laid out on its shapes, then this rank's pieces are
// materialized on `device` (and a whole model's parameters stay where they
// are). Collective.
Parallelized parallelize(std::shared_ptr<nn::Transformer> model, dist::DeviceMesh& mesh,
                         const TrainConfig& config, const Device& device);

}  // namespace spmd::train
