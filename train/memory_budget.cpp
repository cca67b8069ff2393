// The other half of memory_plan.h: the budget a rank must fit, the table
// spmd-train prints, and the refusal with a layout that would fit.

#include <algorithm>
#include <cstdio>

#include "parallel/comm/host/transport.h"
#include "parallel/comm/object_collectives.h"
#include "parallel/pipeline/stage.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "tensor/cuda_api.h"
#include "train/memory_plan.h"
#include "train/parallelize.h"

namespace spmd::train {
namespace {

constexpr uint64_t kGiB = uint64_t(1) << 30;

std::string shared_by(int64_t ranks, const char* place) {
  return ranks > 1 ? str_cat(", shared by the ", place, "'s ", ranks, " ranks") : "";
}

// Where this rank runs: its machine, as the host backend tells machines
// apart (hostname, boot id, /dev/shm), and, after a '|', its cgroup's
// limit file.
std::string place_of_rank(const MemoryLimits& limits) {
  return str_cat(dist::host::host_identity(), "|", limits.cgroup ? limits.cgroup->file : "");
}

// How many ranks of the world share this one's machine and its cgroup.
// Collective over `world`.
Sharing sharing_of(dist::ProcessGroup& world, const MemoryLimits& limits) {
  if (world.size() == 1) return {};
  const std::string mine = place_of_rank(limits);
  const std::string node = mine.substr(0, mine.find('|'));
  Sharing sharing{0, 0};
  for (const auto& bytes :
       dist::all_gather_bytes(world, std::vector<uint8_t>(mine.begin(), mine.end()))) {
    const std::string theirs(bytes.begin(), bytes.end());
    sharing.node += theirs.substr(0, theirs.find('|')) == node;
    sharing.cgroup += theirs == mine;
  }
  return sharing;
}

// The plan's terms as the table and the message name them.
std::vector<std::pair<std::string, uint64_t>> terms(const MemoryPlan& p) {
  return {{"parameters", p.parameters},
          {"gradients", p.gradients},
          {"optimizer (AdamW)", p.optimizer},
          {"DDP buckets", p.ddp_buckets},
          {"FSDP gathered", p.gathered},
          {"activations", p.activations},
          {"logits", p.logits},
          {"RoPE tables", p.buffers},
          {"checkpoint staging", p.staging}};
}

std::string row(const std::string& label, const std::vector<std::string>& cells) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "  %-20s", label.c_str());
  std::string line = buf;
  for (const std::string& c : cells) {
    std::snprintf(buf, sizeof buf, " %14s", c.c_str());
    line += buf;
  }
  return line + "\n";
}

// The parallel dims of `c` that differ from `from`'s, as "dp_shard = 4, tp = 2".
std::string layout_change(const ParallelConfig& c, const ParallelConfig& from) {
  std::string out;
  const auto dim = [&](const char* name, int64_t a, int64_t b) {
    if (a != b) out += str_cat(out.empty() ? "" : ", ", name, " = ", a);
  };
  dim("dp_replicate", c.dp_replicate, from.dp_replicate);
  dim("dp_shard", c.dp_shard, from.dp_shard);
  dim("tp", c.tp, from.tp);
  dim("pp", c.pp, from.pp);
  return out.empty() ? "this layout" : out;
}

// `config` with one layout of `world` ranks, if check_layout accepts it.
std::optional<TrainConfig> with_layout(const TrainConfig& config, int64_t world, int64_t tp,
                                       int64_t pp) {
  TrainConfig c = config;
  ParallelConfig& p = c.parallel;
  const int64_t others = tp * pp * p.cp;
  if (world % others != 0) return std::nullopt;
  p.dp_replicate = 1, p.dp_shard = world / others, p.tp = tp, p.pp = pp;
  try {
    check_layout(c, int(world));
    check_supported(p);
    if (pp > 1)
      dist::pp::split_layers_interleaved(c.model.n_layers, int(pp), int(p.pp_stages_per_rank));
  } catch (const Error&) {
    return std::nullopt;
  }
  return c;
}

// The config key set above its preset's (or default) value whose return
// to that value would shrink `plan` the most, to less than half: "model.
// vocab_size = 1000000000 makes most of it (at its default 256 the job
// needs 24.5 MiB per rank)"; empty when no one key does.
std::string largest_cause(const TrainConfig& config, int world_size, const MemoryPlan& plan) {
  using Field = int64_t* (*)(TrainConfig&);
  const std::vector<std::pair<const char*, Field>> keys = {
      {"model.vocab_size", [](TrainConfig& c) { return &c.model.vocab_size; }},
      {"model.seq_len", [](TrainConfig& c) { return &c.model.seq_len; }},
      {"model.d_model", [](TrainConfig& c) { return &c.model.d_model; }},
      {"model.n_layers", [](TrainConfig& c) { return &c.model.n_layers; }},
      {"model.n_experts", [](TrainConfig& c) { return &c.model.n_experts; }},
      {"training.global_batch", [](TrainConfig& c) { return &c.training.global_batch; }}};
  TrainConfig reference = load_config("", {"model.preset=\"" + config.model.preset + "\"",
                                           "model.shape=\"" + config.model.shape + "\""});
  std::string cause;
  uint64_t least = plan.peak() / 2;
  for (const auto& [key, field] : keys) {
    TrainConfig c = config;
    const int64_t value = *field(c), usual = *field(reference);
    if (value <= usual) continue;
    *field(c) = usual;
    try {
      SPMD_CHECK(c.model.d_model % c.model.n_heads == 0, "heads");
      check_layout(c, world_size);
    } catch (const Error&) {
      continue;  // the usual value does not fit this layout
    }
    const uint64_t peak = plan_memory(c, plan.rank).peak();
    if (peak >= least) continue;
    least = peak;
    cause = str_cat(key, " = ", value, " makes most of it (at its default ", usual,
                    " the job needs ", format_bytes(peak), " per rank)");
  }
  return cause;
}

}  // namespace

std::vector<BudgetTerm> budget_terms(const TrainConfig& config, const MemoryLimits& limits,
                                     Sharing sharing, std::optional<uint64_t> device_free) {
  std::vector<BudgetTerm> out;
  const uint64_t n = uint64_t(std::max<int64_t>(sharing.node, 1));
  const uint64_t in_cgroup = uint64_t(std::max<int64_t>(sharing.cgroup, 1));
  if (config.training.device == "cpu") {
    if (limits.cgroup)
      out.push_back({limits.cgroup->left() / in_cgroup,
                     str_cat("the cgroup limit of ", format_bytes(limits.cgroup->limit), " in ",
                             limits.cgroup->file, ", less ", format_bytes(limits.cgroup->usage),
                             " in use", shared_by(sharing.cgroup, "cgroup"))});
    if (limits.mem_available != kNoMemoryLimit)
      out.push_back({limits.mem_available / n,
                     str_cat("MemAvailable of ", format_bytes(limits.mem_available),
                             " in /proc/meminfo", shared_by(sharing.node, "node"))});
    if (limits.address_space_left != kNoMemoryLimit)
      out.push_back({limits.address_space_left,
                     str_cat("RLIMIT_AS (ulimit -v) of ", format_bytes(limits.address_space_cap),
                             ", less the address space in use")});
  } else if (device_free) {
    out.push_back({*device_free, "the GPU's free memory"});
  }
  const double gb = config.training.memory_limit_gb;
  if (gb > 0)
    out.push_back({uint64_t(gb * double(kGiB)), str_cat("training.memory_limit_gb = ", gb)});
  return out;
}

BudgetTerm smallest(const std::vector<BudgetTerm>& terms) {
  BudgetTerm best{kNoMemoryLimit, "no limit known"};
  for (const BudgetTerm& t : terms)
    if (t.bytes < best.bytes) best = t;
  return best;
}

MemoryPlan largest_plan(const TrainConfig& config, int world_size) {
  // Ranks differ by their stages and their FSDP chunk, of which the first
  // (dp_shard and cp coordinates 0) is the largest: one rank per pp stage.
  const int64_t per_stage = world_size / config.parallel.pp;
  MemoryPlan largest = plan_memory(config, 0);
  for (int64_t s = 1; s < config.parallel.pp; ++s) {
    MemoryPlan p = plan_memory(config, s * per_stage);
    if (p.peak() > largest.peak()) largest = p;
  }
  return largest;
}

std::optional<TrainConfig> layout_that_fits(const TrainConfig& config, int world_size,
                                            uint64_t budget) {
  constexpr int64_t kMaxRanks = 1 << 16;
  for (int64_t world = world_size; world <= std::min<int64_t>(kMaxRanks, 1024 * world_size);
       world *= 2) {
    // FSDP over every rank the layout leaves, then with tp, then with pp.
    std::vector<std::pair<int64_t, int64_t>> tp_pp = {{config.parallel.tp, config.parallel.pp}};
    for (int64_t tp = 2; tp <= 8; tp *= 2) tp_pp.push_back({tp, config.parallel.pp});
    for (int64_t pp = 2; pp <= 16; pp *= 2) tp_pp.push_back({config.parallel.tp, pp});
    for (const auto& [tp, pp] : tp_pp) {
      const auto c = with_layout(config, world, tp, pp);
      if (c && largest_plan(*c, int(world)).peak() <= budget) return c;
    }
  }
  return std::nullopt;
}

std::string plan_table(const std::vector<MemoryPlan>& plans, const BudgetTerm& budget) {
  std::vector<std::string> head;
  for (const MemoryPlan& p : plans) head.push_back(str_cat("rank ", p.rank));
  std::string out = "memory plan, per rank:\n" + row("", head);
  for (size_t i = 0; i < terms(plans[0]).size(); ++i) {
    std::vector<std::string> cells;
    uint64_t any = 0;
    for (const MemoryPlan& p : plans) {
      cells.push_back(format_bytes(terms(p)[i].second));
      any += terms(p)[i].second;
    }
    if (any > 0) out += row(terms(plans[0])[i].first, cells);
  }
  std::vector<std::string> peak, shape;
  for (const MemoryPlan& p : plans) {
    peak.push_back(format_bytes(p.peak()));
    shape.push_back(str_cat(p.in_flight, " x ", p.microbatch_rows, " x ", p.tokens_per_row));
  }
  out += row("peak (a step)", peak);
  out += row("microbatches x rows x T", shape);
  out += str_cat("  budget: ", format_bytes(budget.bytes), " (", budget.source, ")\n");
  return out;
}

void check_plan_fits(const TrainConfig& config, int world_size, const MemoryPlan& plan,
                     const std::vector<BudgetTerm>& budget) {
  const BudgetTerm limit = smallest(budget);
  if (plan.peak() <= limit.bytes) return;
  std::string parts;
  for (const auto& [name, bytes] : terms(plan))
    if (bytes > 0) parts += str_cat(parts.empty() ? "" : ", ", name, " ", format_bytes(bytes));
  std::string others;
  for (const BudgetTerm& t : budget)
    if (t.source != limit.source)
      others += str_cat("; ", format_bytes(t.bytes), " (", t.source, ")");
  std::string fix;
  if (const auto c = layout_that_fits(config, world_size, limit.bytes)) {
    const int64_t ranks = c->parallel.dp_replicate * c->parallel.dp_shard * c->parallel.tp *
                          c->parallel.pp * c->parallel.cp;
    fix = str_cat(layout_change(c->parallel, config.parallel), " on ", ranks, " ranks needs ",
                  format_bytes(largest_plan(*c, int(ranks)).peak()), " per rank");
  } else {
    fix =
        "no layout of up to 1024 times as many ranks fits: lower training.global_batch "
        "(or raise training.microbatches), model.seq_len or the model's size";
  }
  const std::string cause = largest_cause(config, world_size, plan);
  SPMD_THROW(OutOfMemoryError, "the job needs ", format_bytes(plan.peak()), " per rank on ",
             world_size, world_size == 1 ? " rank" : " ranks", " (rank ", plan.rank, ": ", parts,
             "); the limit is ", format_bytes(limit.bytes), " (", limit.source, ")",
             others.empty() ? "" : str_cat(", and the others: ", others.substr(2)),
             cause.empty() ? "" : "; " + cause, "; ", fix);
}

MemoryPlan check_memory_plan(const TrainConfig& config, dist::ProcessGroup& world) {
  const int n = world.size();
  const MemoryPlan plan = plan_memory(config, world.rank());
  const MemoryLimits limits = memory_limits();
  // On a GPU, its free memory (the rank's own: GPU LOCAL_RANK).
  std::optional<uint64_t> device_free;
  if (config.training.device == "cuda" && cuda::is_available()) {
    const int local = n == 1 ? 0 : launch_env_from_environment().local_rank;
    if (local < cuda::device_count()) device_free = cuda::mem_get_info(local).free;
  }
  const std::vector<BudgetTerm> budget =
      budget_terms(config, limits, sharing_of(world, limits), device_free);
  if (world.rank() == 0) {
    const MemoryPlan largest = largest_plan(config, n);
    std::vector<MemoryPlan> plans = {plan};
    if (largest.rank != plan.rank && largest.peak() != plan.peak()) plans.push_back(largest);
    std::printf("%s", plan_table(plans, smallest(budget)).c_str());
    std::fflush(stdout);
  }
  // Every rank's refusal (empty where it fits), so that each rank says the
  // whole of the first one's, whichever rank the launcher reports.
  std::string why;
  try {
    check_plan_fits(config, n, plan, budget);
  } catch (const OutOfMemoryError& e) {
    why = e.what();
  }
  const std::vector<uint8_t> mine(why.begin(), why.end());
  const auto all =
      n == 1 ? std::vector<std::vector<uint8_t>>{mine} : dist::all_gather_bytes(world, mine);
  for (int r = 0; r < n; ++r)
    if (!all[size_t(r)].empty())
      SPMD_THROW(OutOfMemoryError, r == world.rank() ? "" : str_cat("rank ", r, ": "),
                 std::string(all[size_t(r)].begin(), all[size_t(r)].end()));
  return plan;
}

std::string measured_beside_plan(const MemoryPlan& plan, uint64_t allocator_peak,
                                 uint64_t peak_rss) {
  return str_cat("memory of rank ", plan.rank, ": planned peak ", format_bytes(plan.peak()),
                 "; measured: the allocator's peak ", format_bytes(allocator_peak),
                 peak_rss > 0 ? str_cat(", the process's peak RSS ", format_bytes(peak_rss)) : "",
                 "\n");
}

}  // namespace spmd::train
