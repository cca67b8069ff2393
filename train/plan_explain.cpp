// spmd-plan --explain: the introduction's argument in numbers. One device
// cannot train a 405-billion-parameter model: its model states alone, under
// mixed precision with AdamW, are 18 bytes per parameter. Then the layout
// the planner finds on a stated cluster, beside the one Meta published for
// Llama 3.1 405B ("The Llama 3 Herd of Models", section 3.3.2, Table 4:
// TP 8, CP 1, PP 16, DP 128 on 16,384 H100s at sequence 8,192), each term
// by term from the memory plan (docs/planner.md); on a cluster with an
// arithmetic rate and links, each one's step time, tokens/s and MFU too.
// The paper leaves Meta's schedule and microbatches unstated: the planner
// fills them in with the fastest that fits (1F1B, interleaved over 2 to 7
// stages per rank, or ZB-H1; 16 microbatches or more).
#include <cstdio>
#include <string>

#include "autograd/nn/transformer.h"
#include "runtime/error.h"
#include "train/flops.h"
#include "train/planner.h"

namespace spmd::train {
namespace {

// 405853388800 -> "405,853,388,800"
std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string line(const char* name, uint64_t per_parameter, uint64_t bytes) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "  %-22s %2llu B/parameter %14s\n", name,
                (unsigned long long)per_parameter, format_gb(bytes).c_str());
  return buf;
}

// The model states of one device, as ModelStates counts them.
std::string one_device(const TrainConfig& config, const Cluster& cluster) {
  const ModelStates s = model_states(config);
  const nn::TransformerConfig t = transformer_config(config.model);
  std::string out =
      str_cat("model \"", config.model.preset, "\": ", t.n_layers, " layers, d_model ", t.d_model,
              ", ", t.n_heads, " heads (", t.n_kv_heads > 0 ? t.n_kv_heads : t.n_heads,
              " kv), FFN ", t.hidden_dim(), ", vocabulary ", t.vocab_size, ", sequence ",
              t.max_seq_len, "\n", "parameters: ", with_commas(s.parameters), "\n\n",
              "one device training all of it, bf16 weights with f32 master weights and AdamW:\n");
  out += line("bf16 weights", 2, s.bf16_weights);
  out += line("f32 master weights", 4, s.f32_master);
  out += line("f32 gradients", 4, s.f32_gradients);
  out += line("AdamW's 2 moments, f32", 8, s.adam_moments);
  out += line("total", 18, s.total());
  const uint64_t devices = (s.total() + cluster.device_memory - 1) / cluster.device_memory;
  out += str_cat("  (ZeRO's count, with fp16 gradients: 16 B/parameter, ",
                 format_gb(s.zero_total()), ")\n");
  if (s.total() > cluster.device_memory) {
    char share[32];
    std::snprintf(share, sizeof(share), "%.1f%%",
                  100.0 * double(cluster.device_memory) / double(s.total()));
    out += str_cat("a device of ", format_gb(cluster.device_memory), " holds ", share,
                   " of that: the model states alone need ", devices,
                   " such devices, before a single activation\n");
  } else {
    out += str_cat("that fits a device of ", format_gb(cluster.device_memory),
                   " before activations\n");
  }
  return out;
}

// Meta's dims for the 405B model on this many devices (dp the rest). Untimed:
// the fewest microbatches and the least checkpointing that fit, as the search
// chooses them. Timed: of the schedules and microbatches that fit, the
// fastest. nullopt when the devices do not make those dims.
std::optional<Fit> meta_layout(const TrainConfig& config, const Cluster& cluster) {
  if (config.model.preset != "llama3.1-405b" || cluster.devices % 128 != 0) return std::nullopt;
  std::vector<std::pair<std::string, int64_t>> schedules = {{config.parallel.pp_schedule, 1}};
  if (cluster.timed()) {
    schedules = {{"1f1b", 1}, {"zbh1", 1}};
    for (int64_t v = 2; 16 * v <= config.model.n_layers; ++v)
      schedules.push_back({"interleaved", v});
  }
  std::optional<Fit> smallest, fastest;
  for (const auto& [schedule, v] : schedules) {
    for (const char* ac : {"none", "full"}) {
      for (int64_t m = 16; m <= config.training.global_batch; m *= 2) {
        const Layout l{1, cluster.devices / 128, 8, 16, 1, m, ac, schedule, v};
        try {
          check_planned_layout(with_layout(config, l), cluster.devices);
        } catch (const InvalidArgument&) {
          continue;
        }
        const Fit f = evaluate(config, l, cluster);
        if (f.plan.peak() <= cluster.device_memory) {
          if (!cluster.timed()) return f;
          if (!fastest || f.time->total < fastest->time->total) fastest = f;
        }
        if (!smallest || f.plan.peak() < smallest->plan.peak()) smallest = f;
      }
    }
  }
  return fastest ? fastest : smallest;
}

}  // namespace

ModelStates model_states(const TrainConfig& config) {
  const TrainConfig one = with_layout(config, Layout{});
  check_layout(one, 1);
  ModelStates s;
  s.parameters = int64_t(plan_memory(one, 0).parameters / 4);  // the plan counts f32 bytes
  const uint64_t n = uint64_t(s.parameters);
  s.bf16_weights = 2 * n, s.f32_master = 4 * n, s.f32_gradients = 4 * n, s.adam_moments = 8 * n;
  return s;
}

std::string explain(const TrainConfig& config, const Cluster& cluster) {
  std::string out = one_device(config, cluster);
  out += str_cat("\non ", cluster.devices, " devices of ", format_gb(cluster.device_memory), " (",
                 cluster.devices_per_node, " per node), sequence ", config.model.seq_len,
                 ", global batch ", config.training.global_batch,
                 " sequences, training.mixed_precision ", config.training.mixed_precision, ":\n");
  if (cluster.timed()) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "  each device %s achievable of %s peak; busbw %.0f GB/s within a node, %.0f "
                  "GB/s per device between nodes; latency %.1f us and %.1f us per hop\n",
                  format_flops(cluster.flops).c_str(), format_flops(cluster.peak_flops).c_str(),
                  cluster.within.busbw / 1e9, cluster.between.busbw / 1e9,
                  cluster.within.latency * 1e6, cluster.between.latency * 1e6);
    out += buf;
  }
  const Search search = search_layouts(config, cluster);
  const std::optional<Fit> meta = meta_layout(config, cluster);
  std::vector<std::string> heads;
  std::vector<MemoryPlan> plans;
  if (meta) {
    out += str_cat("  Meta's (Llama 3, section 3.3.2, Table 4): ", describe(meta->layout),
                   meta->plan.peak() <= cluster.device_memory ? "" : " (does not fit)", "\n");
    heads.push_back("Meta's"), plans.push_back(meta->plan);
  }
  if (search.fits.empty()) {
    try {
      check_some_layout_fits(search, cluster);
    } catch (const InvalidArgument& e) {
      out += str_cat("  the planner: ", e.what(), "\n");
    }
  } else {
    out +=
        str_cat("  the planner's (", search.fits.size(), " of ", search.layouts, " layouts fit; ",
                cluster.timed() ? "the shortest step" : "the order of docs/planner.md",
                "): ", describe(search.fits[0].layout), "\n");
    heads.push_back("the planner's"), plans.push_back(search.fits[0].plan);
  }
  if (!plans.empty()) out += "\nper device, the largest rank:\n" + terms_table(heads, plans);
  std::vector<StepTime> times;
  if (meta && meta->time) times.push_back(*meta->time);
  if (!search.fits.empty() && search.fits[0].time) times.push_back(*search.fits[0].time);
  if (!times.empty() && times.size() == heads.size())
    out += str_cat("\n", time_table(heads, times));
  return out;
}

}  // namespace spmd::train
