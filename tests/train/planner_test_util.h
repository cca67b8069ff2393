// What the planner's tests (test_planner, test_planner_axes) share: a small
// Llama shape, a cluster slow enough that step times are read off by hand,
// the step time of one layout on it, and a layout's refusal.
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "train/config.h"
#include "train/planner.h"

namespace spmd::train::testing {

// A small Llama: vocabulary 256, C 64, 2 layers, 4 heads of 16, 2 kv heads
// (kv dim 32), FFN 128, T 32, untied head, global batch 8; `more` overrides.
inline TrainConfig small_llama(std::vector<std::string> more = {}) {
  std::vector<std::string> o = {
      "model.preset=custom", "model.shape=llama",    "model.vocab_size=256",
      "model.d_model=64",    "model.n_layers=2",     "model.n_heads=4",
      "model.n_kv_heads=2",  "model.ffn_hidden=128", "model.seq_len=32"};
  o.insert(o.end(), more.begin(), more.end());
  return load_config("", o);
}

// A device of 1 GFLOP/s (peak 2) and a link of 1 GB/s busbw within a node
// (0.1 GB/s between), no latency: seconds are FLOPs / 1e9 and bytes x the
// ring's factor / 1e9.
inline Cluster slow_cluster(int64_t devices, int64_t per_node = 8) {
  Cluster c;
  c.devices = devices, c.devices_per_node = per_node, c.device_memory = 80000000000ull;
  c.flops = 1e9, c.peak_flops = 2e9;
  c.within = {1e9, 0}, c.between = {1e8, 0};
  return c;
}

// The step time of `layout` on `cluster` (which must time it).
inline StepTime time_of(const TrainConfig& c, const std::string& layout, const Cluster& cluster) {
  const Fit f = evaluate(c, parse_layout(layout), cluster);
  REQUIRE(f.time);
  return *f.time;
}

// check_planned_layout's message for `layout` of `c` on `devices`, or
// "(no refusal)".
inline std::string refusal(const TrainConfig& c, const std::string& layout, int64_t devices) {
  try {
    check_planned_layout(with_layout(c, parse_layout(layout)), devices);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no refusal)";
}

}  // namespace spmd::train::testing
