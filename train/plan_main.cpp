// spmd-plan: which layouts of a model fit a cluster's memory, before any
// device is touched.
//
//   spmd-plan --explain llama3.1-405b [--devices 16384 --device-memory 80GB]
//   spmd-plan --config configs/fsdp.toml --devices 8 --device-memory 80GB
//             [--seq-len T] [--global-batch B] [--top 5]
//   spmd-plan --config X --devices 8 --device-memory 80GB --layout dp_shard=4,tp=2
//   spmd-plan --config X --devices 8 --device-memory 80GB --write-config best.toml
//   spmd-plan --config X --nodes 2 --devices-per-node 8 --device-memory 80GB
//             --peak-tflops 989 --achievable 0.7 --intra-bw 360 --inter-bw 40
//             [--intra-latency 2 --inter-latency 5] [--busbw FILE] [--no-overlap]
//             [--mem-bw 3350]
//   spmd-plan --measure cpu|cuda [--measure-seconds 2]
//
// --explain shows why one device cannot train the model, then the planner's
// layout beside Meta's. --config searches every layout of --devices and
// prints the best that fit; with --layout it checks that one layout and
// prints its largest rank's memory term by term. --write-config writes the
// config with the first layout of the table (or --layout's) as a TOML file
// spmd-train reads. Given a device's arithmetic rate (--peak-tflops with
// --achievable, or --gemm-tflops measured) and its links (--intra-bw and
// --inter-bw in GB/s of busbw, or --busbw FILE from spmd-bench --json), each
// layout gets a step time, tokens/s, MFU and what bounds it, and the table
// is sorted by step time (train/step_time.h); given --mem-bw as well, the
// ops other than the products take their bytes over it (step_traffic.h).
// --measure times this machine's GEMM and memory bandwidth and prints them
// as those flags. Every input is checked
// before any work, and a refusal says why (train/planner.h, docs/planner.md).
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/durable_file.h"
#include "runtime/error.h"
#include "runtime/flag_checks.h"
#include "tensor/cuda_api.h"
#include "tensor/device.h"
#include "tensor/threads.h"
#include "train/config.h"
#include "train/flops.h"
#include "train/planner.h"

using namespace spmd;

namespace {

struct Args {
  std::string explain, config, device_memory, layout, write_config;
  int64_t devices = 0, devices_per_node = 8, nodes = 0, seq_len = 0, global_batch = 0;
  bool has_seq_len = false, has_global_batch = false, no_overlap = false;
  size_t top = 5;
  // The timing flags, as typed (checked by number_flag).
  std::string peak_tflops, achievable, gemm_tflops, intra_bw, inter_bw, intra_latency,
      inter_latency, busbw, busbw_between, mem_bw, measure;
  double measure_seconds = 2;
};

// A timing flag's value: 0 when not given; else a finite number in (0, max]
// ([0, max] when `zero_ok`), refused naming the flag and the value.
double number_flag(const std::string& flag, const std::string& text, double max, bool zero_ok) {
  if (text.empty()) return 0;
  const std::string why = flags::number_error(text, 0, max, !zero_ok);
  SPMD_CHECK(why.empty(), flag, ": ", why);
  return std::strtod(text.c_str(), nullptr);
}

// --explain's cluster when its flags are not given: Meta's 16,384 H100 SXM
// of 80 GB (Llama 3, section 3.3.1), 8 per node on NVLink, a 400 Gb/s link
// per GPU between nodes (docs/planner.md, "The chapter's cluster", gives
// each figure and what is assumed).
Args with_h100_defaults(Args a) {
  const auto fill = [](std::string& s, const char* v) {
    if (s.empty()) s = v;
  };
  if (a.devices == 0 && a.nodes == 0) a.devices = 16384;
  fill(a.device_memory, "80GB");
  if (a.gemm_tflops.empty()) fill(a.peak_tflops, "989"), fill(a.achievable, "0.7");
  fill(a.intra_bw, "360"), fill(a.inter_bw, "40");
  fill(a.intra_latency, "2"), fill(a.inter_latency, "5");
  return a;
}

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
  SPMD_CHECK(a.devices_per_node >= 1 && a.devices_per_node <= (int64_t(1) << 20),
             "--devices-per-node must be in [1, 2^20], got ", a.devices_per_node);
  SPMD_CHECK(a.nodes >= 0 && a.nodes <= (int64_t(1) << 30),
             "--nodes must be in [1, 2^30] (or not given), got ", a.nodes);
  const int64_t devices = a.devices > 0 || a.nodes == 0 ? a.devices : a.nodes * a.devices_per_node;
  SPMD_CHECK(devices >= 1 && devices <= (int64_t(1) << 30), "--devices must be in [1, 2^30], got ",
             devices);
  SPMD_CHECK(a.nodes == 0 || devices == a.nodes * a.devices_per_node, "--devices ", devices,
             " is not --nodes ", a.nodes, " x --devices-per-node ", a.devices_per_node, " = ",
             a.nodes * a.devices_per_node);
  train::Cluster c;
  c.devices = devices, c.devices_per_node = a.devices_per_node;
  c.device_memory = train::parse_bytes("--device-memory", a.device_memory);
  // The arithmetic: a measured GEMM rate, or the peak x the fraction reached.
  const double peak = number_flag("--peak-tflops", a.peak_tflops, 1e6, false) * 1e12;
  const double gemm = number_flag("--gemm-tflops", a.gemm_tflops, 1e6, false) * 1e12;
  const double achievable = number_flag("--achievable", a.achievable, 1, false);
  SPMD_CHECK(gemm == 0 || achievable == 0, "give --gemm-tflops (measured) or --achievable (a ",
             "fraction of --peak-tflops), not both");
  SPMD_CHECK(achievable == 0 || peak > 0, "--achievable ", a.achievable,
             " is a fraction of --peak-tflops, which is not given");
  SPMD_CHECK(peak == 0 || gemm > 0 || achievable > 0, "--peak-tflops ", a.peak_tflops,
             " needs --achievable (the fraction of it the model's GEMMs reach, e.g. 0.7) or "
             "--gemm-tflops (a GEMM's rate measured)");
  c.peak_flops = peak, c.flops = gemm > 0 ? gemm : peak * achievable;
  c.memory_bw = number_flag("--mem-bw", a.mem_bw, 1e6, false) * 1e9;
  SPMD_CHECK(c.memory_bw == 0 || c.flops > 0, "--mem-bw ", a.mem_bw, " times the ops other ",
             "than the products; it needs a rate for those: --gemm-tflops, or --peak-tflops with ",
             "--achievable");
  // The links, in GB/s of busbw and microseconds per hop.
  c.within = {number_flag("--intra-bw", a.intra_bw, 1e6, false) * 1e9,
              number_flag("--intra-latency", a.intra_latency, 1e6, true) * 1e-6};
  c.between = {number_flag("--inter-bw", a.inter_bw, 1e6, false) * 1e9,
               number_flag("--inter-latency", a.inter_latency, 1e6, true) * 1e-6};
  if (!a.busbw.empty()) c.busbw_within = train::BusbwTable::read("--busbw", a.busbw);
  if (!a.busbw_between.empty())
    c.busbw_between = train::BusbwTable::read("--busbw-between", a.busbw_between);
  c.overlap = !a.no_overlap;
  if (!c.timed()) return c;
  SPMD_CHECK(c.within.busbw > 0 || !c.busbw_within.empty(),
             "a step time needs the links within a node: --intra-bw GB/s or --busbw FILE");
  SPMD_CHECK(c.devices <= c.devices_per_node || c.between.busbw > 0 || !c.busbw_between.empty(),
             "a step time on ", c.devices / c.devices_per_node,
             " nodes needs the links between them: --inter-bw GB/s or --busbw-between FILE");
  return c;
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
  const train::Fit fit = train::evaluate(config, layout, cluster);
  std::printf("%s on %lld devices:\n%s", train::describe(layout).c_str(),
              (long long)cluster.devices,
              train::terms_table({"the largest rank"}, {fit.plan}).c_str());
  if (fit.time) std::printf("\n%s", train::time_table({"the layout"}, {*fit.time}).c_str());
  SPMD_CHECK(fit.plan.peak() <= cluster.device_memory, "the layout needs ",
             train::format_gb(fit.plan.peak()), " per device, more than the ",
             train::format_gb(cluster.device_memory), " of --device-memory");
  write_config(out, config, layout);
  return 0;
}

// --measure: this machine's rates, as spmd-plan's flags. Run one per rank
// at once on a machine its ranks share (bench/plan_calibration.py does).
int measure(const Args& a) {
  SPMD_CHECK(a.measure == "cpu" || a.measure == "cuda", "--measure: cpu or cuda, got \"", a.measure,
             "\"");
  const std::string why = flags::number_error(std::to_string(a.measure_seconds), 0.1, 600, false);
  SPMD_CHECK(why.empty(), "--measure-seconds: ", why);
  SPMD_CHECK(a.measure == "cpu" || cuda::is_available(), "--measure cuda: no GPU is visible here (",
             cuda::device_count(), " devices)");
  const Device device = a.measure == "cpu" ? Device::cpu() : Device::cuda(0);
  const train::DeviceRates r = train::measured_rates(device, a.measure_seconds);
  std::printf("measured on %s (%s), each over a window of %.1f s:\n", a.measure.c_str(),
              a.measure == "cpu" ? str_cat(num_threads(), " threads").c_str() : "device 0",
              a.measure_seconds / 2);
  std::printf("  f32 GEMM %lld^3            %s   --gemm-tflops %.6f\n", (long long)r.gemm_n,
              train::format_flops(r.gemm_flops).c_str(), r.gemm_flops / 1e12);
  std::printf("  add a += b, 2 x %lld MiB   %.1f GB/s   --mem-bw %.3f\n",
              (long long)(r.add_bytes >> 20), r.memory_bw / 1e9, r.memory_bw / 1e9);
  return 0;
}

int run(const Args& a) {
  if (!a.measure.empty()) return measure(a);
  SPMD_CHECK(a.explain.empty() != a.config.empty(),
             "give --explain PRESET or --config FILE (one of them)");
  SPMD_CHECK(a.explain.empty() || a.layout.empty(), "--layout goes with --config, not --explain");
  SPMD_CHECK(a.explain.empty() || a.write_config.empty(),
             "--write-config goes with --config, not --explain");
  if (!a.explain.empty()) {
    // --explain's cluster, unless given: Meta's 16,384 H100s of 80 GB.
    const Args e = with_h100_defaults(a);
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
  std::printf("%zu of %lld layouts of %lld devices fit %s each; the first %zu %s:\n%s",
              search.fits.size(), (long long)search.layouts, (long long)cluster.devices,
              train::format_gb(cluster.device_memory).c_str(), std::min(a.top, search.fits.size()),
              cluster.timed() ? "by step time" : "by the order of docs/planner.md",
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
  app.add_option("--nodes", a.nodes, "nodes (devices = nodes x devices per node)");
  app.add_option("--peak-tflops", a.peak_tflops, "a device's peak TFLOP/s (dense, the precision)");
  app.add_option("--achievable", a.achievable, "the fraction of the peak its GEMMs reach (0.7)");
  app.add_option("--gemm-tflops", a.gemm_tflops, "a GEMM's TFLOP/s measured, for --achievable");
  app.add_option("--intra-bw", a.intra_bw, "busbw within a node, GB/s");
  app.add_option("--inter-bw", a.inter_bw, "busbw between nodes per device, GB/s");
  app.add_option("--intra-latency", a.intra_latency, "latency per hop within a node, us");
  app.add_option("--inter-latency", a.inter_latency, "latency per hop between nodes, us");
  app.add_option("--busbw", a.busbw, "spmd-bench --json rows measured within a node");
  app.add_option("--busbw-between", a.busbw_between, "spmd-bench --json rows across nodes");
  app.add_option("--mem-bw", a.mem_bw, "memory bandwidth, GB/s: the non-product ops' bytes");
  app.add_option("--measure", a.measure, "time this machine's GEMM and memory: cpu or cuda");
  app.add_option("--measure-seconds", a.measure_seconds, "how long --measure times (default 2)");
  app.add_flag("--no-overlap", a.no_overlap, "FSDP/DDP/CP traffic does not hide behind compute");
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
