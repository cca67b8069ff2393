// The memory traffic of one training step of a rank: the bytes that the ops
// other than the products (the GEMMs and attention, which step_time.h times
// by their FLOPs) read and write. Norms, residual adds, activations, RoPE,
// the copies into attention's head layout, the biases, the loss, the
// strategies' copies into and out of their flat buffers, the gradient norm
// and AdamW: each moves its tensors through memory once or twice and does
// little arithmetic on them, so its time is its bytes over the device's
// memory bandwidth (the roofline's memory-bound side; Williams, Waterman and
// Patterson, "Roofline", CACM 2009).
//
// Counted per token of a block, in activation elements, from the ops the
// model runs (docs/planner.md, "Memory traffic", has the table), on the
// device-independent path the meta and GPU devices take (the CPU's fused
// bias + GELU reads the MLP's first product once less). test_dry_run holds
// the count to what the profiler counts in a dry run's step.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/nn/transformer.h"
#include "train/config.h"
#include "train/memory_plan.h"

namespace spmd::train {

struct StepTraffic {
  double passes = 0;  // bytes: the forwards and backwards, a recomputed forward again
  double update = 0;  // bytes: after them (the gradient norm, the clip, AdamW)
  double clip = 0;    // of `update`, the clip's scaling, when the norm exceeds training.grad_clip
  double total() const { return passes + update; }
};

// The blocks of each pipeline rank's stages (one list without a pipeline),
// split as spmd-train splits them (split_layers_interleaved).
std::vector<std::vector<int64_t>> blocks_of_pipeline_ranks(const TrainConfig& config);

// Whether block b of the model is an MoE block (blocks 0, moe_every, ...).
bool is_moe_block(const nn::TransformerConfig& t, int64_t b);

// What of block b's forward runs again in its backward: nothing; all of it
// (a checkpointed block under full or selective k: its GEMMs, attention
// and collectives again); or under selective "op" the cheap ops between
// the products, whose outputs it keeps (autograd/selective_checkpoint.h):
// the norms, the activation, RoPE, and the block's forward collectives
// (tp's, ep's all_to_alls), which are not on the save list.
enum class Rerun { kNone, kAll, kCheapOps };
Rerun rerun_of(const TrainConfig& config, int64_t b);

// The rank's dense parameters (not its experts'), in elements, before FSDP
// cuts them: tp-local, its stages; under FSDP the plan's gradients are the
// chunk padded to the full one, so x dp_shard x cp.
double dense_parameters(const TrainConfig& config, const MemoryPlan& plan);

// The pipeline position of `rank` in a world of `world` ranks (pp is the
// mesh's outermost axis).
inline int64_t pipeline_rank(const ParallelConfig& p, int64_t rank, int64_t world) {
  return rank / (world / p.pp);
}

// The traffic of one step of a rank at pipeline position `pp_rank` (0 ..
// pp - 1; the embedding on the first, the head and loss on the last), whose
// memory plan is `plan` (its parameters give the update's size and the
// strategies' copies).
StepTraffic step_traffic(const TrainConfig& config, const MemoryPlan& plan, int64_t pp_rank);

}  // namespace spmd::train
