// The dry run: one rank of a layout of any size, run alone in one process.
// That rank's share of the model is laid out on the meta device (shapes,
// no bytes) exactly as spmd-train lays it out, and one training step's
// control flow runs on it: the forwards and backwards of every microbatch,
// the strategies' collectives, the gradients' sync, the clip, and AdamW's
// state made at its first step. The collectives go through a fake process
// group (parallel/comm/fake/fake_process_group.h), which moves nothing and
// logs each call; every allocation the step would make is counted on the
// meta device, not made (tensor/meta_memory.h).
//
// What it gives: this rank's exact parameter, gradient and optimizer bytes
// (the storages behind its tensors), the peak of everything else the step
// holds at once (activations, gathered FSDP units, logits, temporaries), and
// each mesh axis's communication volume per step. The planner's memory plan
// (train/memory_plan.h) is checked against it at full scale.
//
// Every tensor is on meta whatever training.device says, and no data is
// read: the rows are meta tensors of the batch's shape.
//
// Stand-ins where real code reads values: a meta tensor's values read as
// zeros (the loss, the norm), and MoE routing is uniform (token n's k
// choices are experts nk .. nk+k-1 mod E), so every expert receives the
// same rows (docs/dry_run.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "parallel/comm/fake/fake_process_group.h"
#include "train/config.h"
#include "train/memory_plan.h"
#include "train/parallelize.h"
#include "train/step_traffic.h"

namespace spmd::train {

// One mesh axis's (or group's) traffic in the step, from this rank.
struct AxisTraffic {
  std::string axis;  // "dp_shard", "dp_shard×cp", or a group no mesh line names
  int64_t ranks = 1;
  uint64_t calls = 0;
  uint64_t bytes = 0;            // payload, as CommStats counts it
  std::vector<std::string> ops;  // "all_gather ×32 = 1.2 GB", per op type
};

struct DryRun {
  int64_t rank = 0, world = 1;
  uint64_t parameters = 0, gradients = 0, optimizer = 0;  // the storages' bytes
  // The most the step held at once beside the three: in its forwards and
  // backwards (what the plan's activation terms count), and after them (the
  // sync, the clip and AdamW's temporaries, which the plan does not count).
  uint64_t activation_peak = 0, update_peak = 0;
  std::vector<AxisTraffic> traffic;
  std::vector<dist::FakeCall> calls;  // the step's, in issue order
  // The bytes the step's ops other than the products (matmul, attention)
  // hand to the device, as the profiler counts them (each tensor an op
  // reads or writes, once: tensor/profiled_backend.h): in the forwards and
  // backwards, and after them (the sync's copies, the norm, the clip,
  // AdamW). The step time's memory traffic (step_time.h) is checked
  // against them. Per op, largest first.
  double pass_bytes = 0, update_bytes = 0;
  std::vector<std::pair<std::string, double>> pass_ops, update_ops;
  double build_seconds = 0, step_seconds = 0;
};

// One training step as spmd-train's loop runs it (train/trainer.cpp) on
// this rank's rows x, y: zero_grad, forward_backward, sync_gradients,
// clip_grad_norm, batch_loss, optimizer_step. Collective over the world.
// `after_backward`, when given, runs between forward_backward and the rest.
void train_one_step(Parallelized& par, const TrainConfig& config, const Tensor& x, const Tensor& y,
                    const std::function<void()>& after_backward = {});

// Checks that `rank` is a rank of a world of `world` ranks and that the
// layout fits it (check_layout). Throws InvalidArgument naming the flag,
// the value and the limit.
void check_dry_run(const TrainConfig& config, int64_t world, int64_t rank);

// Rank `rank` of a world of `world` ranks, one step, on meta tensors
// through a fake process group. REQUIRES: check_dry_run passed (checked).
DryRun dry_run(const TrainConfig& config, int64_t world, int64_t rank);

// The run as spmd-train --dry-run prints it, beside the memory plan and
// the step time's count of the memory traffic.
std::string dry_run_report(const DryRun& run, const MemoryPlan& plan, const StepTraffic& planned);

}  // namespace spmd::train
