// The time of one training step of a layout, worked out from the config,
// the memory plan of its largest rank and the cluster (docs/planner.md,
// "Step time", gives each formula and its source):
//
//   compute   the slowest pipeline rank's FLOPs (forward and backward, the
//             forward again for each block whose products are recomputed:
//             all under full checkpointing, every k-th under selective k,
//             none under selective "op"; attention's T^2 term; an MoE
//             block's experts whole on every tp rank) over the device's
//             achievable FLOP/s, and, given the memory's bandwidth, the
//             bytes of the rank's other ops (norms, activations, copies,
//             the loss, the gradient norm, AdamW) over it (step_traffic.h;
//             without a bandwidth the achievable rate stands for them);
//   comm      each strategy's collectives: bytes x the ring's factor over
//             the busbw of the link its mesh axis runs on (within a node
//             when the axis's ranks fit in one, given the mesh order
//             pp, dp_replicate, dp_shard, cp, tp), plus latency per hop;
//   overlap   FSDP's and DDP's traffic hides behind compute (but a
//             pipeline reduces its gradients after the step, and so does
//             ep's sync), CP's ring behind the attention it feeds; tensor
//             parallelism's, expert parallelism's all_to_alls and the
//             pipeline's sends do not;
//   bubble    the schedule's idle time: (pp - 1) microbatch times for GPipe
//             and 1F1B, / v interleaved over v stages per rank, / 3 for ZB-H1.
//
// Not modelled: uneven MoE routing (taken uniform), the vocabulary-parallel
// loss's small all_reduces, uneven GEMM efficiency at small shapes.
#pragma once

#include <string>
#include <vector>

#include "train/cluster.h"
#include "train/config.h"
#include "train/memory_plan.h"

namespace spmd::train {

// The collectives of one strategy in one step of one rank.
struct CommTerm {
  std::string axis;         // the mesh axis (or flattened axes) it runs over: "dp_shard", "tp", ...
  std::string op;           // spmd-bench's name: all_gather, reduce_scatter, all_reduce, sendrecv
  std::string what;         // "FSDP parameters, forward and backward"
  int64_t group = 1;        // ranks in the group
  int64_t calls = 0;        // per step
  double bytes = 0;         // per call, in spmd-bench's size convention
  bool overlapped = false;  // hidden behind compute when the cluster overlaps
  bool after_step = false;  // gradients reduced after a pipeline's last backward
  bool within_node = true;
  double seconds = 0;  // all the calls
  double exposed = 0;  // of which the step waits for
};

struct StepTime {
  double compute = 0;  // seconds of the slowest rank's ops, the step's microbatches
  double memory = 0;   // of which its non-product ops' memory traffic (0: no bandwidth given)
  double bubble = 0;   // the pipeline's idle time
  std::vector<CommTerm> comm;
  double exposed = 0;  // communication the step waits for
  double total = 0;    // the step
  double tokens_per_s = 0;
  double mfu = 0;     // model FLOPs (flops.h, PaLM's) / (step x devices x peak); 0: no peak
  std::string bound;  // "compute 82%", "dp_shard comm 61%", "bubble 48%", "tp comm 30%"
};

// The step time of `config`'s layout on the cluster, `plan` the memory plan
// of its largest rank (its parameters give the collectives' sizes).
// REQUIRES: check_layout(config, cluster.devices) passed; cluster.timed().
StepTime step_time(const TrainConfig& config, const MemoryPlan& plan, const Cluster& cluster);

// The seconds of `calls` calls of `op` over `group` ranks of `bytes` each,
// on the link of an axis with `per_node` of its ranks in each node it spans
// (group when it fits in one node): the ring's factor over the busbw (the
// measured table's when the cluster has one), plus the latency of each hop.
double collective_seconds(const Cluster& cluster, const std::string& op, int64_t group,
                          int64_t per_node, int64_t calls, double bytes);

// Step times side by side, one column each: compute, the bubble, each
// collective (its axis, op, calls and whether it hides behind compute), the
// exposed communication, the step, tokens/s, MFU and what bounds it.
std::string time_table(const std::vector<std::string>& heads, const std::vector<StepTime>& times);

// "1.23 s", "45.6 ms", "789 us".
std::string format_seconds(double seconds);

}  // namespace spmd::train
