// step_time(): the arithmetic of the slowest rank, each strategy's
// collectives over its mesh axis's link, what hides behind what, and the
// pipeline's bubble (step_time.h; the formulas and their sources are in
// docs/planner.md, "Step time"). Its table is in plan_tables.cpp.
#include "train/step_time.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "autograd/nn/checkpoint_wrapper.h"
#include "autograd/nn/transformer.h"
#include "parallel/ddp/gradient_average.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage.h"
#include "runtime/error.h"
#include "train/flops.h"
#include "train/step_traffic.h"

namespace spmd::train {
namespace {

// Where an axis's ranks sit: `size` ranks `stride` apart in the mesh's
// row-major order (pp outermost, tp innermost).
struct Axis {
  std::string name;
  int64_t size = 1, stride = 1;
};

// Its ranks in each node it spans: all of them when stride x size fits a
// node, one when the stride is a node or more, else a node's worth.
int64_t per_node(const Axis& a, int64_t devices_per_node) {
  if (a.stride * a.size <= devices_per_node) return a.size;
  if (a.stride >= devices_per_node) return 1;
  return devices_per_node / a.stride;
}

// The share of a buffer each rank's link carries in a ring (nccl-tests' busbw
// factor), and the ring's hops, each paying the link's latency.
double ring_factor(const std::string& op, int64_t n) {
  if (op == "sendrecv") return 1;
  const double share = double(n - 1) / double(n);
  return op == "all_reduce" ? 2 * share : share;
}
int64_t ring_hops(const std::string& op, int64_t n) {
  if (op == "sendrecv") return 1;
  return op == "all_reduce" ? 2 * (n - 1) : n - 1;
}

// Block b's GEMMs and attention run again in its backward (full or
// selective k; selective "op" reruns only cheap ops, whose FLOPs the
// achievable rate already covers), and its forward collectives too (any
// checkpointing).
bool recomputes_products(const TrainConfig& config, int64_t b) {
  return rerun_of(config, b) == Rerun::kAll;
}
bool reruns_collectives(const TrainConfig& config, int64_t b) {
  return rerun_of(config, b) != Rerun::kNone;
}

// The hardware FLOPs per token of block b's forward on one tp rank: 2 per
// weight (a multiply-add) and attention's q k^T and p v, 2 x C x T each.
// tp splits the attention and a dense MLP; an MoE block's router and
// experts run whole on every tp rank (layout_check.cpp).
double block_forward_flops(const nn::TransformerConfig& t, int64_t b, int64_t tp) {
  const double attention = 2 * attention_weights(t) + 4 * double(t.d_model) * double(t.max_seq_len);
  const double mlp = 2 * (block_weights(t, b) - attention_weights(t));
  return attention / double(tp) + (is_moe_block(t, b) ? mlp : mlp / double(tp));
}

// The FLOPs per token of each pipeline rank on one tp rank, forward and
// backward (backward = 2 x forward), the forward once more for each block
// whose products are recomputed.
std::vector<double> rank_flops_per_token(const TrainConfig& config,
                                         const nn::TransformerConfig& t) {
  const std::vector<std::vector<int64_t>> ranks = blocks_of_pipeline_ranks(config);
  std::vector<double> out;
  for (size_t r = 0; r < ranks.size(); ++r) {
    double f = 0;
    for (int64_t b : ranks[r])
      f += (recomputes_products(config, b) ? 4 : 3) * block_forward_flops(t, b, config.parallel.tp);
    if (r + 1 == ranks.size()) f += 6 * head_weights(t) / double(config.parallel.tp);
    out.push_back(f);
  }
  return out;
}

}  // namespace

double collective_seconds(const Cluster& cluster, const std::string& op, int64_t group,
                          int64_t per_node, int64_t calls, double bytes) {
  if (group <= 1 || calls == 0) return 0;
  const bool within = per_node >= group;
  const BusbwTable& table = within ? cluster.busbw_within : cluster.busbw_between;
  double busbw = 0, latency = 0;
  if (!table.empty()) {
    busbw = table.busbw(op, group, bytes);  // its latency is in the measured figure
  } else if (within) {
    busbw = cluster.within.busbw;
    latency = double(ring_hops(op, group)) * cluster.within.latency;
  } else {
    // Across nodes, a group with k ranks per node runs k rings at once, one
    // per device's network link (NCCL's channels), at most the node's own.
    busbw = std::min(double(per_node) * cluster.between.busbw,
                     per_node > 1 ? cluster.within.busbw : cluster.between.busbw);
    const double crossings = double(group / per_node);  // the ring enters each node once
    const double hops = double(ring_hops(op, group));
    const double slow = std::min(hops, crossings * hops / double(group - 1));
    latency = slow * cluster.between.latency + (hops - slow) * cluster.within.latency;
  }
  SPMD_CHECK(busbw > 0, "step time: no bus bandwidth for ", op, " over ", group, " ranks ",
             within ? "within a node" : "across nodes");
  return double(calls) * (bytes * ring_factor(op, group) / busbw + latency);
}

namespace {

// A rank's share of one step: the microbatches it runs and their tokens,
// its blocks (the pipeline rank with the most), the bytes of an
// activation's element.
struct Share {
  int64_t m = 1, v = 1;
  int64_t blocks = 0;               // its blocks
  int64_t recomputed = 0;           // of which the GEMMs and attention run again in backward
  int64_t reruns = 0;               // of which the forward's collectives run again
  int64_t moe = 0, moe_reruns = 0;  // its MoE blocks, and of those, the rerun ones
  double tokens = 0;                // of one microbatch, on this rank
  double act = 4;                   // bytes of an activation's element: 2 under bf16
  double C = 0, T = 0;
};

Share share_of(const TrainConfig& config) {
  const ParallelConfig& p = config.parallel;
  Share s;
  s.m =
      p.pp > 1 ? (p.pp_microbatches > 0 ? p.pp_microbatches : p.pp) : config.training.microbatches;
  s.v = p.pp > 1 ? p.pp_stages_per_rank : 1;
  const nn::TransformerConfig t = transformer_config(config.model);
  s.C = double(t.d_model), s.T = double(t.max_seq_len);
  const int64_t dp = p.dp_replicate * p.dp_shard;
  s.tokens = double(config.training.global_batch / dp / s.m) * s.T / double(p.cp);
  s.act = config.training.mixed_precision == "bf16" ? 2 : 4;
  std::vector<int64_t> most;
  for (const std::vector<int64_t>& blocks : blocks_of_pipeline_ranks(config))
    if (blocks.size() > most.size()) most = blocks;
  s.blocks = int64_t(most.size());
  for (int64_t b : most) {
    s.recomputed += recomputes_products(config, b);
    s.reruns += reruns_collectives(config, b);
    s.moe += is_moe_block(t, b);
    s.moe_reruns += is_moe_block(t, b) && reruns_collectives(config, b);
  }
  return s;
}

// The all_reduces of `bytes` of gradients in 25 MB buckets (DDP's
// bucket_cap_mb, dist::kAverageBucketBytes), at least one.
int64_t buckets_of(double bytes) {
  return std::max<int64_t>(1, int64_t(std::ceil(bytes / double(dist::kAverageBucketBytes))));
}

// Each strategy's collectives in one step of the rank (the table of
// docs/planner.md, "Communication"), each timed on its axis's link.
std::vector<CommTerm> collectives(const TrainConfig& config, const MemoryPlan& plan,
                                  const Cluster& cluster, const Share& s) {
  const ParallelConfig& p = config.parallel;
  const int64_t fsdp = p.dp_shard * p.cp;
  // The rank's dense parameters before FSDP cuts them; its experts are
  // ep's (whole on this rank, averaged after the step).
  const double experts = double(plan.experts) / 4;
  const double local = dense_parameters(config, plan);
  const int64_t units = s.blocks + 1;  // each block an FSDP unit, and the root
  std::vector<CommTerm> out;
  const auto add = [&](Axis axis, const std::string& op, const std::string& what, int64_t calls,
                       double bytes, bool overlapped, bool after = false) {
    if (calls == 0 || axis.size <= 1) return;
    const int64_t k = per_node(axis, cluster.devices_per_node);
    CommTerm c{axis.name, op, what, axis.size, calls, bytes, overlapped, k >= axis.size};
    // Under pp the gradients are reduced once, after the step's last
    // backward (docs/train.md), and so are ep's (`after`): nothing is left
    // to hide them behind.
    c.after_step = after || (p.pp > 1 && what.find("gradient") != std::string::npos);
    c.overlapped = overlapped && !c.after_step;
    c.seconds = collective_seconds(cluster, op, axis.size, k, calls, bytes);
    out.push_back(c);
  };
  // Each axis's stride: the product of the axes inside it.
  const int64_t inner_rep = p.dp_shard * p.cp * p.tp, inner_pp = p.dp_replicate * inner_rep;

  // Data parallel: FSDP over dp_shard x cp (HSDP: and an all_reduce of the
  // shards over dp_replicate), or DDP over dp_replicate x cp.
  if (p.dp_shard > 1) {
    const Axis shard{p.cp > 1 ? "dp_shard x cp" : "dp_shard", fsdp, p.tp};
    const bool split_backward =
        p.pp > 1 && dist::pp::splits_backward(dist::pp::parse_schedule(p.pp_schedule));
    const int64_t gathers = p.fsdp_reshard_after_forward && !split_backward ? 2 * s.m : 1;
    const double unit = local / double(units);
    add(shard, "all_gather", "FSDP parameters", s.blocks * gathers + 1, unit * s.act, true);
    add(shard, "reduce_scatter", "FSDP gradients", units, unit * 4, true);
    add({"dp_replicate", p.dp_replicate, inner_rep}, "all_reduce", "HSDP gradient shards", units,
        unit * 4 / double(fsdp), true);
  } else {
    const Axis replicas{p.cp > 1 ? "dp_replicate x cp" : "dp_replicate", p.dp_replicate * p.cp,
                        p.tp};
    // DDP's bucket_cap_mb, and average_gradients' buckets (pipeline and ep).
    const double bytes = local * 4;
    const int64_t buckets = buckets_of(bytes);
    if (p.ep == 1) {
      add(replicas, "all_reduce", "DDP gradients", buckets, bytes / double(buckets), true);
    } else {  // ep::sync_gradients: the dense gradients, bucket by bucket, after the step
      add(replicas, "all_reduce", "dense gradients (ep's sync)", buckets, bytes / double(buckets),
          false, true);
    }
  }
  // Expert parallel (ep ranks tp apart in the data axes, parallelize.cpp):
  // per MoE block and microbatch, the tokens' k routed copies dispatched
  // and combined forward, and their gradients both ways backward; again for
  // a block whose forward reruns (dispatch.h). After the step, each expert's gradient
  // averaged over the ranks that hold a copy of it.
  if (p.ep > 1) {
    const double k = double(config.model.moe_top_k);
    add({"ep", p.ep, p.tp}, "all_to_all", "EP tokens (dispatch, combine)",
        s.m * (4 * s.moe + 2 * s.moe_reruns), s.tokens * k * s.C * s.act, false);
    // Before each forward dispatch, the rows each rank sends each expert:
    // an all_to_all of n_experts int64 counts, all latency.
    add({"ep", p.ep, p.tp}, "all_to_all", "EP routing counts", s.m * (s.moe + s.moe_reruns),
        double(config.model.n_experts) * 8, false);
    const int64_t copies = p.dp_replicate * p.dp_shard * p.cp / p.ep;
    const int64_t expert_buckets = buckets_of(experts * 4 / double(s.v));  // each stage's
    add({"expert dp", copies, p.tp * p.ep}, "all_reduce", "expert gradients (ep's sync)",
        s.v * expert_buckets, experts * 4 / double(s.v * expert_buckets), false, true);
  }
  // Tensor parallel: per block and pass (forward, backward, and the forward
  // again of a block that reruns it), two all_gathers and two
  // reduce_scatters of the microbatch's (b, T, C) under sequence parallelism
  // (two all_reduces without), and the embedding's and head's.
  if (p.tp > 1) {
    const bool sp = p.sequence_parallel;
    const int64_t per_pass = sp ? 4 : 2;
    const int64_t ends = sp ? 4 : 2;  // the embedding's and the head's, forward and backward
    add({"tp", p.tp, 1}, sp ? "all_gather" : "all_reduce", "TP activations",
        s.m * (per_pass * (2 * s.blocks + s.reruns) + ends), s.tokens * s.C * s.act, false);
  }
  // Context parallel: ring attention passes K and V (repeated to all heads)
  // cp - 1 times forward (again for a recomputed block; selective "op"
  // keeps its output), and K, V and their gradients back.
  add({"cp", p.cp, p.tp}, "sendrecv", "CP ring K, V (and dK, dV)",
      s.m * ((s.blocks + s.recomputed) * (p.cp - 1) + s.blocks * (2 * p.cp - 1)),
      s.tokens * 2 * s.C * s.act, true);
  // Pipeline: each microbatch's activation forward and its gradient back.
  add({"pp", p.pp, inner_pp}, "sendrecv", "PP activations", 2 * s.m * s.v, s.tokens * s.C * s.act,
      false);
  return out;
}

// The schedule's bubble, in microbatch times per stage but the first:
// 1 for GPipe and 1F1B, 1/v interleaved over v stages per rank, 1/3 ZB-H1.
double bubble_share(const ParallelConfig& p) {
  const auto kind = dist::pp::parse_schedule(p.pp_schedule);
  if (kind == dist::pp::ScheduleKind::kInterleaved1F1B) return 1.0 / double(p.pp_stages_per_rank);
  if (kind == dist::pp::ScheduleKind::kZeroBubbleH1) return 1.0 / 3;
  return 1.0;
}

// "compute 82%": the largest share of the step, of compute, the bubble, and
// each axis's exposed communication.
std::string bound_of(const StepTime& st) {
  std::pair<std::string, double> top{"compute", st.compute};
  if (st.bubble > top.second) top = {"bubble", st.bubble};
  for (const CommTerm& c : st.comm) {
    double axis_total = 0;
    for (const CommTerm& d : st.comm)
      if (d.axis == c.axis) axis_total += d.exposed;
    if (axis_total > top.second) top = {c.axis + " comm", axis_total};
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, " %.0f%%", 100 * top.second / st.total);
  return top.first + buf;
}

}  // namespace

StepTime step_time(const TrainConfig& config, const MemoryPlan& plan, const Cluster& cluster) {
  const ParallelConfig& p = config.parallel;
  const nn::TransformerConfig t = transformer_config(config.model);
  const Share s = share_of(config);
  StepTime st;
  st.comm = collectives(config, plan, cluster, s);
  // Compute, and the attention in it that CP's ring hides behind (q k^T
  // and p v, 4 C T FLOPs a token forward, in every pass).
  // The slowest pipeline rank's arithmetic and, given the memory's
  // bandwidth, the traffic of its other ops (step_traffic.h).
  const std::vector<double> flops = rank_flops_per_token(config, t);
  for (size_t r = 0; r < flops.size(); ++r) {
    const double arithmetic = double(s.m) * s.tokens * flops[r] / cluster.flops;
    const double memory = cluster.memory_bw > 0
                              ? step_traffic(config, plan, int64_t(r)).total() / cluster.memory_bw
                              : 0;
    if (arithmetic + memory > st.compute) st.compute = arithmetic + memory, st.memory = memory;
  }
  const double attention = double(s.m) * s.tokens * double(3 * s.blocks + s.recomputed) * 4 * s.C *
                           s.T / double(p.tp) / cluster.flops;
  // What the step waits for: the blocking collectives (in every
  // microbatch), CP's beyond its attention, the gradients' reductions after
  // a pipeline's step; FSDP's and DDP's traffic only beyond all the compute.
  double blocking = 0, hidden = 0, after = 0;
  for (CommTerm& c : st.comm) {
    if (c.after_step) {
      after += c.exposed = c.seconds;
    } else if (!c.overlapped || !cluster.overlap) {
      blocking += c.exposed = c.seconds;
    } else if (c.axis == "cp") {
      blocking += c.exposed = std::max(0.0, c.seconds - attention);
    } else {
      hidden += c.seconds;
    }
  }
  const double unhidden = std::max(0.0, hidden - st.compute);
  for (CommTerm& c : st.comm)
    if (c.overlapped && cluster.overlap && c.axis != "cp" && !c.after_step)
      c.exposed = hidden > 0 ? unhidden * c.seconds / hidden : 0;  // shared in proportion
  if (p.pp > 1)
    st.bubble = double(p.pp - 1) * (st.compute + blocking) / double(s.m) * bubble_share(p);
  st.exposed = blocking + after + unhidden;
  st.total = st.compute + st.bubble + st.exposed;
  const double step_tokens = double(config.training.global_batch) * s.T;
  st.tokens_per_s = step_tokens / st.total;
  if (cluster.peak_flops > 0)
    st.mfu = flops_per_token(t) * step_tokens /
             (st.total * double(cluster.devices) * cluster.peak_flops);
  st.bound = bound_of(st);
  return st;
}

}  // namespace spmd::train
