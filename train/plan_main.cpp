// spmd-plan: which layouts of a model fit a cluster's memory, before any
// device is touched.
//
//   spmd-plan --explain llama3.1-405b [--devices 16384 --device-memory 80GB]
//   spmd-plan --config configs/fsdp.toml --devices 8 --device-memory 80GB
//             [--seq-len T] [--global-batch B] [--top 5]
//   spmd-plan --config X --devices 8 --device-memory 80GB --layout dp_shard=4,tp=2
//   spmd-plan --config X --devices 8 --device-memory 80GB --write-config best.toml
//
// --explain shows why one device cannot train the model, then the planner's
// layout beside Meta's. --config searches every layout of --devices and
// prints the best that fit; with --layout it checks that one layout and
// prints its largest rank's memory term by term. --write-config writes the
// config with the first layout of the table (or --layout's) as a TOML file
// spmd-train reads. Every input is checked
// before any work, and a refusal says why (train/planner.h, docs/planner.md).
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/durable_file.h"
#include "runtime/error.h"
#include "train/config.h"
#include "train/planner.h"

using namespace spmd;

namespace {

struct Args {
  std::string explain, config, device_memory, layout, write_config;
  int64_t devices = 0, devices_per_node = 8, seq_len = 0, global_batch = 0;
  bool has_seq_len = false, has_global_batch = false;
  size_t top = 5;
};

// The model: the config file (or, for --explain, the preset) with the
// sequence and batch given on the command line; load_config checks them.
train::TrainConfig model_config(const Args& a) {
  std::vector<std::string> overrides;
  if (!a.explain.empty()) {
    overrides.push_back("model.preset=" + a.explain);
    overrides.push_back("training.mixed_precision=bf16");
    // Meta's batch for Llama 3.1 405B at sequence 8,192: about 16M tokens.
    if (!a.has_global_batch) overrides.push_back("training.global_batch=2048");
  }
  if (a.has_seq_len) overrides.push_back("model.seq_len=" + std::to_string(a.seq_len));
  if (a.has_global_batch)
    overrides.push_back("training.global_batch=" + std::to_string(a.global_batch));
  return train::load_config(a.config, overrides);
}

train::Cluster cluster_of(const Args& a) {
  SPMD_CHECK(a.devices >= 1 && a.devices <= (int64_t(1) << 30),
             "--devices must be in [1, 2^30], got ", a.devices);
  SPMD_CHECK(a.devices_per_node >= 1, "--devices-per-node must be at least 1, got ",
             a.devices_per_node);
  return {a.devices, a.devices_per_node, train::parse_bytes("--device-memory", a.device_memory)};
}

// --write-config: the config with `layout`, written whole (synced, then
// renamed into place), for spmd-train --config.
void write_config(const std::string& path, const train::TrainConfig& config,
                  const train::Layout& layout) {
  if (path.empty()) return;
  replace_durably(path, train::to_toml(train::with_layout(config, layout)));
  std::printf("wrote %s: %s\n", path.c_str(), train::describe(layout).c_str());
}

// --layout: that layout's checks, then its largest rank term by term.
int check_one(const train::TrainConfig& config, const train::Cluster& cluster,
              const std::string& text, const std::string& out) {
  const train::Layout layout = train::parse_layout(text);
  train::check_planned_layout(train::with_layout(config, layout), cluster.devices);
  const train::Fit fit = train::evaluate(config, layout, cluster.devices);
  std::printf("%s on %lld devices:\n%s", train::describe(layout).c_str(),
              (long long)cluster.devices,
              train::terms_table({"the largest rank"}, {fit.plan}).c_str());
  SPMD_CHECK(fit.plan.peak() <= cluster.device_memory, "the layout needs ",
             train::format_gb(fit.plan.peak()), " per device, more than the ",
             train::format_gb(cluster.device_memory), " of --device-memory");
  write_config(out, config, layout);
  return 0;
}

int run(const Args& a) {
  SPMD_CHECK(a.explain.empty() != a.config.empty(),
             "give --explain PRESET or --config FILE (one of them)");
  SPMD_CHECK(a.explain.empty() || a.layout.empty(), "--layout goes with --config, not --explain");
  SPMD_CHECK(a.explain.empty() || a.write_config.empty(),
             "--write-config goes with --config, not --explain");
  if (!a.explain.empty()) {
    // --explain's cluster, unless given: Meta's 16,384 H100s of 80 GB.
    Args e = a;
    if (e.devices == 0) e.devices = 16384;
    if (e.device_memory.empty()) e.device_memory = "80GB";
    const train::Cluster cluster = cluster_of(e);
    const train::TrainConfig config = model_config(e);
    std::printf("%s", train::explain(config, cluster).c_str());
    return 0;
  }
  SPMD_CHECK(!a.device_memory.empty(), "--device-memory is needed with --config (80GB, 24GiB)");
  const train::Cluster cluster = cluster_of(a);
  const train::TrainConfig config = model_config(a);
  if (!a.layout.empty()) return check_one(config, cluster, a.layout, a.write_config);
  const train::Search search = train::search_layouts(config, cluster);
  train::check_some_layout_fits(search, cluster);
  std::printf(
      "%zu of %lld layouts of %lld devices fit %s each; the first %zu by the order of "
      "docs/planner.md:\n%s",
      search.fits.size(), (long long)search.layouts, (long long)cluster.devices,
      train::format_gb(cluster.device_memory).c_str(), std::min(a.top, search.fits.size()),
      train::fits_table(search.fits, a.top).c_str());
  write_config(a.write_config, config, search.fits.front().layout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The search builds and frees thousands of memory plans; glibc would hand
  // the freed pages back to the kernel after each and fault them in again
  // (a third of the 405B search's time). Keep them in the process.
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
  CLI::App app{"spmd-plan: which layouts of a model fit a cluster's memory (docs/planner.md)"};
  Args a;
  app.add_option("--explain", a.explain, "a preset: why one device cannot hold it");
  app.add_option("--config", a.config, "a trainer config (its model, batch and precision)");
  app.add_option("--devices", a.devices, "devices in the cluster");
  app.add_option("--devices-per-node", a.devices_per_node, "devices per node; tp stays in one");
  app.add_option("--device-memory", a.device_memory, "each device's memory: 80GB, 24GiB");
  app.add_option("--seq-len", a.seq_len, "tokens per sequence (model.seq_len)");
  app.add_option("--global-batch", a.global_batch, "sequences per step (training.global_batch)");
  app.add_option("--layout", a.layout,
                 "check one layout: dp_shard=4,tp=2,pp=2,microbatches=4,ac=full");
  app.add_option("--top", a.top, "layouts to print (default 5)");
  app.add_option("--write-config", a.write_config,
                 "write the config with the best layout (or --layout's) to this TOML file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  a.has_seq_len = app.count("--seq-len") > 0;
  a.has_global_batch = app.count("--global-batch") > 0;
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spmd-plan: %s\n", e.what());
    return 1;
  }
}
