// The memory plan: what one rank of a training job will hold, worked out from
// the config and the layout alone, before any tensor is allocated, and the
// budget it must fit. spmd-train prints it at start and refuses a job that
// does not fit, with a layout that would (docs/train.md, "The memory plan").
//
// A rank holds, in f32:
//
//   parameters    its pieces of the model: tp slices, its pipeline stages'
//                 blocks, its experts, and under FSDP its dim-0 chunk of
//                 each (torch.chunk's cut: the last ranks may hold fewer
//                 rows); the model is built on the meta device, so no
//                 rank holds more than its pieces (docs/memory.md)
//   gradients     one per parameter; under FSDP the reduce-scatter's output
//                 block, whose chunks are padded to the full chunk
//   optimizer     AdamW's two moments per parameter
//   DDP buckets   DDP's flat copy of every gradient, kept between steps
//   gathered      FSDP units held whole at once (bf16 under
//                 training.mixed_precision = "bf16"): the root's parameters and
//                 gradients for the whole step, and a block unit computing
//                 while the next one's all_gather (forward) or the last one's
//                 reduce_scatter (backward) is in flight; every unit's, when
//                 reshard_after_forward is off (parameters) or a pipeline
//                 accumulates full gradients until the step's end
//   activations   what the forward saves for the backward, per microbatch
//                 in flight (1 without a pipeline; under pp as the
//                 schedule's action list holds them), by checkpointing mode
//                 (none, full, selective "op" or every k-th block), each
//                 tensor at the bytes autocast keeps it in (bf16 or f32)
//   logits        the head's (b, T, V/tp) output and, in backward, its
//                 gradient, per microbatch in flight on the last stage
//   buffers       RoPE tables, every block's
//   checkpoint staging  with checkpoint.async, the host copy of the rank's
//                 parameters and moments that each save is staged into,
//                 held from the first save to the run's end
//
// Not counted: the dataset, the communicators' buffers (shared-memory
// rings), the allocator's cache, temporaries that live within one op.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "parallel/comm/process_group.h"
#include "runtime/resource_limits.h"
#include "train/config.h"

namespace spmd::train {

struct MemoryPlan {
  int64_t rank = 0;
  uint64_t parameters = 0, gradients = 0, optimizer = 0, ddp_buckets = 0;
  uint64_t gathered = 0, activations = 0, logits = 0;
  uint64_t experts = 0;  // of `parameters`, the experts' (ep averages their gradients, not DP)
  // Of the gradients FSDP does not shard, the bytes of those each as large
  // as a bucket of dist::average_gradients, which reduces them in place
  // (the dense ones, and the experts').
  uint64_t in_place = 0, experts_in_place = 0;
  uint64_t buffers = 0;  // RoPE tables (every block's, built whole)
  uint64_t staging = 0;  // checkpoint.async's staging buffers
  // The shape of the activation terms, for the table.
  int64_t microbatch_rows = 0, tokens_per_row = 0, in_flight = 0;

  // Everything held during a step.
  uint64_t step_bytes() const {
    return parameters + gradients + optimizer + ddp_buckets + gathered + activations + logits +
           buffers + staging;
  }
  // The most held at once: the model is built on the meta device, so its
  // construction holds nothing, and the step is the peak.
  uint64_t peak() const { return step_bytes(); }
};

// The plan of `rank` of the layout config.parallel describes.
// REQUIRES: check_layout(config, world) passed; 0 <= rank < world.
MemoryPlan plan_memory(const TrainConfig& config, int64_t rank);

// One limit on a rank's memory, per rank, and where it comes from.
struct BudgetTerm {
  uint64_t bytes = 0;
  std::string source;  // "the cgroup limit of 4.0 GiB in .../memory.max, less its usage, / 2 ranks"
};

// How many ranks share each limit with this one: the ranks on its machine
// (MemAvailable) and the ranks in its cgroup (its limit), which are the
// same when a launcher starts a node's ranks in one cgroup (spmdrun,
// torchrun, srun) and fewer when each rank has a cgroup of its own.
struct Sharing {
  int64_t node = 1, cgroup = 1;
};

// The limits on one rank's memory: on the CPU, the cgroup's and the
// machine's MemAvailable, each shared as `sharing` says, the address space
// (RLIMIT_AS) of the process; training.memory_limit_gb in either case; the
// GPU's free memory, given by the caller, when training on one (nullopt:
// not known). The smallest is the budget.
std::vector<BudgetTerm> budget_terms(const TrainConfig& config, const MemoryLimits& limits,
                                     Sharing sharing,
                                     std::optional<uint64_t> device_free = std::nullopt);
BudgetTerm smallest(const std::vector<BudgetTerm>& terms);

// The plan as a table, one column per plan (rank 0's, and the largest
// rank's when it differs), and the budget below it.
std::string plan_table(const std::vector<MemoryPlan>& plans, const BudgetTerm& budget);

// The rank whose plan is the largest (the first such); a pure function of
// the config, the same on every rank.
MemoryPlan largest_plan(const TrainConfig& config, int world_size);

// A layout of world_size ranks or more (dp_shard grown first, then tp, then
// pp) whose largest plan fits `budget` bytes per rank: the config with it,
// or nullopt. Each added rank is taken to bring its own budget.
std::optional<TrainConfig> layout_that_fits(const TrainConfig& config, int world_size,
                                            uint64_t budget);

// Throws OutOfMemoryError when plan.peak() exceeds the budget: "the job
// needs 7.9 GiB per rank on 1 rank (rank 0: parameters ..., ...); the limit
// is 3.0 GiB (...); dp_shard = 4 on 4 ranks needs 2.4 GiB per rank".
void check_plan_fits(const TrainConfig& config, int world_size, const MemoryPlan& plan,
                     const std::vector<BudgetTerm>& budget);

// What spmd-train does before it builds anything: each rank plans its own
// memory and finds its budget (this machine's limits, shared with the ranks
// on its machine and in its cgroup, counted over the world); rank 0 prints the table (its plan and
// the largest rank's); then, if any rank does not fit, every rank throws OutOfMemoryError with
// check_plan_fits()'s message of the first such rank ("rank 3: ..." on the
// others).
// Collective over `world`. Returns this rank's plan.
MemoryPlan check_memory_plan(const TrainConfig& config, dist::ProcessGroup& world);

// The line printed after the run: the plan's peak beside the measured one
// (the allocator's peak, on the CPU also the process's peak RSS).
std::string measured_beside_plan(const MemoryPlan& plan, uint64_t allocator_peak,
                                 uint64_t peak_rss);

}  // namespace spmd::train
