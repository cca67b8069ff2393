// spmd-plan's logic: which layouts of a model fit a cluster's memory, and why
// the largest models fit no single device. Every layout is judged by the
// memory plan of its largest rank (train/memory_plan.h), the same plan
// spmd-train checks before it allocates; the planner adds the search, its
// own refusals, and the one-device breakdown of the model states under mixed
// precision (docs/planner.md).
//
// Given the cluster's arithmetic rate and links, each layout also gets a
// step time (train/step_time.h: compute, each axis's communication, the
// bubble), and the search orders the layouts that fit by it; without them,
// by a stated rule of thumb (fits_before).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/cluster.h"
#include "train/config.h"
#include "train/memory_plan.h"
#include "train/step_time.h"

namespace spmd::train {

// Bytes from a size: a number and a unit, "80GB" (80 x 10^9), "80GiB"
// (80 x 2^30), "512MB", "512MiB", "1.5TB", "2TiB", "kB"/"KiB", or a whole
// number of bytes alone ("4096"). Units are read case-blind.
// Throws InvalidArgument naming `flag` and `text` for anything else, and for 0.
uint64_t parse_bytes(const std::string& flag, const std::string& text);

// Sizes as the planner prints them, in decimal units as devices are sold:
// "811.7 GB", "396.4 MB", "1.0 kB", and "0".
std::string format_gb(uint64_t bytes);

// One layout of the search: the parallel dims (ep borrows its ranks from
// the data axes), how many microbatches a rank splits its batch into (the
// pipeline's under pp, gradient accumulation's without), activation
// checkpointing ("none", "full", "op": selective with the products kept, or
// a positive integer k as a string: selective, every k-th block full), and
// the pipeline's schedule and stages per rank ("" and 0: the config's).
struct Layout {
  int64_t dp_replicate = 1, dp_shard = 1, tp = 1, pp = 1, cp = 1;
  int64_t microbatches = 0;  // 0: pp (1 without a pipeline)
  std::string checkpointing = "none";
  std::string schedule = "";    // gpipe, 1f1b, interleaved or zbh1
  int64_t stages_per_rank = 0;  // interleaved's v
  int64_t ep = 1;
  bool operator==(const Layout&) const = default;
};

// "dp_shard=128,tp=8,pp=16,microbatches=16,ac=full,schedule=interleaved,v=2":
// keys dp_replicate, dp_shard, tp, pp, cp, ep, microbatches, v (positive
// integers), ac (none, full, op, or k: selective every k-th block) and
// schedule; a key not given keeps its default.
// Throws InvalidArgument naming --layout and the piece it could not read.
Layout parse_layout(const std::string& text);

// "dp_shard 128 · tp 8 · pp 16 · 16 microbatches · ac full"; a schedule
// the layout names follows pp: "pp 16 interleaved x 4", "pp 4 zbh1"; ep
// follows the data axes ("dp_shard 4 · ep 2"); selective checkpointing
// reads "ac op" or "ac every 2".
std::string describe(const Layout& layout);

// `config` with the layout's dims (sequence parallel with tp when the
// model has no experts), its microbatches, checkpointing ("op" and k as
// "selective" with that selective_ac_option) and, when it names one,
// schedule; mixed precision stays the config's.
TrainConfig with_layout(const TrainConfig& config, const Layout& layout);

// What spmd-train's check_layout() and check_supported() check against
// `devices`, and the planner's own rule: a pipeline of S stages runs at least S microbatches
// (fewer leave a stage idle for the whole step).
// Throws InvalidArgument with the reason.
void check_planned_layout(const TrainConfig& config, int64_t devices);

// A layout, the memory plan of its largest rank, and its step time when the
// cluster gives the figures for one.
struct Fit {
  Layout layout;
  MemoryPlan plan;
  std::optional<StepTime> time;
};

// The layout's largest rank, and with a timed() cluster its step time.
// REQUIRES: check_planned_layout(with_layout(config, layout), devices) passed.
Fit evaluate(const TrainConfig& config, const Layout& layout, int64_t devices);
Fit evaluate(const TrainConfig& config, const Layout& layout, const Cluster& cluster);

// The order of the table: the shorter step first when both are timed, then
// less memory. Untimed, a rule of thumb: fewer ranks splitting one sample
// (tp x cp x pp: each costs communication in the step or a pipeline bubble)
// first, then less recomputation (none, op, every k-th, full), then fewer
// microbatches, then less memory.
bool fits_before(const Fit& a, const Fit& b);

// Every valid layout of the cluster's devices: each order of dp_replicate x
// dp_shard x cp x tp x pp = devices with tp within a node, and for a model
// with experts each ep the checks allow; for each, the first of
// (checkpointing none, op, every 2nd block, full) x (microbatches dividing
// the rank's batch, fewest first, at least pp) that fits. On a timed
// cluster, the fastest instead: of each mode's microbatch counts from the
// fewest that fit up, of the modes, and of the schedules (the config's,
// ZB-H1, interleaved over v = 2..7 stages per rank as the layers allow).
struct Search {
  std::vector<Fit> fits;        // best first (fits_before)
  std::optional<Fit> smallest;  // the least memory of any valid layout tried
  int64_t layouts = 0;          // valid layouts (dims) tried
};
Search search_layouts(const TrainConfig& config, const Cluster& cluster);

// The fits as a table: layout, memory per device (the largest rank's peak),
// the term that dominates it, and when timed the step time, tokens/s, MFU
// and what bounds the step; the first `top` of them.
std::string fits_table(const std::vector<Fit>& fits, size_t top);

// One plan (or two side by side) term by term, with its peak.
std::string terms_table(const std::vector<std::string>& heads,
                        const std::vector<MemoryPlan>& plans);

// Throws InvalidArgument when search.fits is empty: "no layout of 8 devices
// fits 1.0 GB per device: the smallest need is 3.2 GB (dp_shard 8 · ac full)".
void check_some_layout_fits(const Search& search, const Cluster& cluster);

// --- One device (spmd-plan --explain) ----------------------------------------------------

// The model states of one device that trains the whole model under mixed
// precision with AdamW: bf16 weights for compute, f32 master weights, f32
// gradients (spmd and FSDP2 reduce and accumulate them in f32), and
// AdamW's two f32 moments: 2 + 4 + 4 + 8 = 18 bytes per parameter.
struct ModelStates {
  int64_t parameters = 0;
  uint64_t bf16_weights = 0, f32_master = 0, f32_gradients = 0, adam_moments = 0;
  uint64_t total() const { return bf16_weights + f32_master + f32_gradients + adam_moments; }
  // ZeRO's count (Rajbhandari et al. 2020, section 3.1): fp16 gradients, so
  // 2 + 2 + 12 = 16 bytes per parameter.
  uint64_t zero_total() const { return total() - f32_gradients / 2; }
};
ModelStates model_states(const TrainConfig& config);

// spmd-plan --explain: why one device of `cluster` cannot hold the model,
// then the layout the planner chooses on the cluster beside Meta's published
// one for Llama 3.1 405B (tp 8, pp 16, dp 128 on 16,384 GPUs) when the
// cluster can run it, each term by term.
std::string explain(const TrainConfig& config, const Cluster& cluster);

}  // namespace spmd::train
