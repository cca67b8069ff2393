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
