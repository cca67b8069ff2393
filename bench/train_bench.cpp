// spmd-bench-train: tokens per second of one GPT-2 training step (forward,
// cross-entropy, backward, AdamW) on the CPU in f32, or on a GPU in bf16
// mixed precision (AutocastGuard: bf16 products, f32 master weights), with
// the memory it took. One configuration per run, so that the peak belongs
// to that run alone. Its peer is bench/peers/torch_train.py: bench/
// train_bench.py runs the two side by side on the CPU, scripts/gpu-check.sh
// on a GPU.
//
// Random tokens (a fresh batch each step, drawn and placed on the device
// before the clock starts), AdamW lr 3e-4 weight decay 0.1, the median step
// time over --steps steps after --warmup untimed ones. On a GPU each step is
// timed from one cuda::synchronize() to the next. The line gives the model
// FLOPs utilization as spmd-train does (train/flops.h): FLOPs per token
// 6 N + 12 L C T (N the weights a token meets, L layers, width C, context T:
// the products of forward and backward, and the attention scores as if not
// causal, as in PaLM's appendix B), times tokens per second, over the
// hardware's peak: the CPU's measured per-core peak (tensor/cpu/peak.h) x
// --threads, f32 or bf16 as the products are; a GPU's datasheet figure
// (tensor/gpu_peak.h). --peak-tflops sets another; a "# mfu against" line
// before the result says which.
//
//   spmd-bench-train --config tiny --threads 1 [--steps 20] [--warmup 3] [--unfused]
//   spmd-bench-train --device cuda --config gpt2 [--steps 30] [--warmup 5]
// (--unfused: TransformerConfig::fused_kernels off, the unfused compositions
// the fused kernels replace, for a before/after of the fusions, docs/cpu.md)
// prints one line of key=value fields, such as
//   spmd device=cpu config=tiny threads=1 ... tokens_per_s=... step_ms=... peak_rss_mb=...
// with, on the CPU, peak_alloc_mb=... cached_mb=... (the most the tensors
// held at once, and what the caching allocator keeps free at the end:
// tensor/cpu/allocator.h), on a GPU peak_mem_mb=... (max_memory_allocated), then tflops=...
// mfu=... (nan where no peak is known),
// then the medians of the phases, forward_ms (with the loss), backward_ms and
// optimizer_ms (CUDA events on a GPU: no extra wait), and loss_first=...
// loss_last=... (the first and last step's loss).
//
// --profile-top N profiles the timed steps (runtime/profiler.h) and adds a
// line per op of the N with the largest self time, tab-separated:
//   #op <name> <phase> <self ms per step> <calls per step>
// and "#op_total <self ms per step, all ops> <mean step ms>" (means, so that
// the two compare: the first is the profiled time over the steps). (A profiled
// run's tokens/s is not the unprofiled one's; bench/train_bench.py runs it
// apart.) With SPMD_PROFILE=1 the table printed at exit covers the timed
// steps alone, too. --info prints the "# cpu:" and "# blas:" lines only.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/autograd.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "runtime/flag_checks.h"
#include "runtime/profiler.h"
#include "tensor/cpu/allocator.h"
#include "tensor/cpu/bf16_gemm.h"
#include "tensor/cpu/blas.h"
#include "tensor/cpu/capability.h"
#include "tensor/cuda_api.h"
#include "tensor/ops.h"
#include "tensor/threads.h"
#include "train/flops.h"

using namespace spmd;

namespace {

struct Flags {
  std::string config = "tiny";
  std::string device = "cpu";
  std::string autocast = "auto";  // bf16 on a GPU, none on the CPU
  int threads = 1;
  int steps = 20;
  int warmup = 3;
  int64_t batch = 8;
  bool unfused = false;  // TransformerConfig::fused_kernels off: the unfused compositions
  int profile_top = 0;
  double peak_tflops = 0;  // 0: the hardware's (train::hardware_peak)
};

struct Result {
  std::vector<double> step_seconds;
  std::vector<double> phase_ms[3];  // forward (with the loss), backward, optimizer step
  double loss_first = 0, loss_last = 0;
};

// Marks the boundaries of a step's phases without waiting: CUDA events on a
// GPU, the host clock on the CPU (where the work is done when a call returns).
class PhaseMarks {
 public:
  explicit PhaseMarks(Device device) : cuda_(device.is_cuda()) {
    if (cuda_)
      for (int i = 0; i < 4; ++i) events_.emplace_back(/*enable_timing=*/true);
  }
  void mark(int i) {
    if (cuda_) {
      events_[size_t(i)].record();
    } else {
      host_[i] = std::chrono::steady_clock::now();
    }
  }
  // Milliseconds from mark i to mark i + 1. REQUIRES: the marked work has run.
  double ms(int i) const {
    if (cuda_) return events_[size_t(i)].elapsed_ms(events_[size_t(i) + 1]);
    return std::chrono::duration<double, std::milli>(host_[i + 1] - host_[i]).count();
  }

 private:
  bool cuda_;
  std::vector<cuda::Event> events_;
  std::chrono::steady_clock::time_point host_[4];
};

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

void wait_for(Device device) {
  if (device.is_cuda()) cuda::synchronize(device.index);
}

// Runs warmup + steps training steps and times each.
Result train(nn::Transformer& model, const Flags& f, Device device, bool autocast) {
  optim::AdamW opt(model.parameters(), {.lr = 3e-4, .weight_decay = 0.1});
  const nn::TransformerConfig& config = model.config;
  const int64_t B = f.batch, T = config.max_seq_len;
  Generator gen(1);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < f.warmup + f.steps; ++i) {
    const ops::TensorOptions ids{DType::kI64};
    xs.push_back(ops::to(ops::randint(0, config.vocab_size, {B, T}, ids, &gen), device));
    ys.push_back(ops::to(ops::randint(0, config.vocab_size, {B, T}, ids, &gen), device));
  }
  Result r;
  PhaseMarks marks(device);
  wait_for(device);
  for (int i = 0; i < f.warmup + f.steps; ++i) {
    if (i == f.warmup && (f.profile_top > 0 || profiler::enabled())) {
      profiler::reset();  // the timed steps alone
      profiler::start();
    }
    const auto start = std::chrono::steady_clock::now();
    marks.mark(0);
    Tensor loss;
    {
      std::optional<AutocastGuard> guard;
      if (autocast) guard.emplace(DType::kBF16, /*cpu=*/device.is_cpu());
      loss = cross_entropy(model(xs[size_t(i)]), ys[size_t(i)]);
    }
    marks.mark(1);
    opt.zero_grad();
    backward(loss);
    marks.mark(2);
    opt.step();
    marks.mark(3);
    wait_for(device);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i >= f.warmup) {
      r.step_seconds.push_back(seconds);
      for (int k = 0; k < 3; ++k) r.phase_ms[k].push_back(marks.ms(k));
    }
    if (i == 0) r.loss_first = loss.item<double>();  // after the clock: waits for nothing new
    if (i + 1 == f.warmup + f.steps) r.loss_last = loss.item<double>();
  }
  if (f.profile_top > 0) profiler::stop();
  return r;
}

// The profiled steps' ops with the largest self time, per step.
void print_top_ops(const Flags& f, double mean_step_s) {
  const std::vector<profiler::OpStats> rows = profiler::key_averages();
  int64_t self_ns = 0;
  for (const profiler::OpStats& r : rows) self_ns += r.self_ns;
  for (size_t i = 0; i < rows.size() && i < size_t(f.profile_top); ++i) {
    std::printf("#op\t%s\t%s\t%.3f\t%.1f\n", rows[i].name.c_str(), phase_name(rows[i].phase),
                double(rows[i].self_ns) / 1e6 / f.steps, double(rows[i].calls) / f.steps);
  }
  std::printf("#op_total\t%.3f\t%.3f\n", double(self_ns) / 1e6 / f.steps, mean_step_s * 1e3);
}

void run(const Flags& f) {
  set_num_threads(f.threads);
  const Device device = f.device == "cuda" ? Device::cuda(0) : Device::cpu();
  SPMD_CHECK(device.is_cpu() || cuda::is_available(),
             "--device cuda, but no GPU is available (or spmd was built without CUDA)");
  const bool autocast = f.autocast == "bf16" || (f.autocast == "auto" && device.is_cuda());
  nn::TransformerConfig config = nn::TransformerConfig::preset(f.config);
  config.fused_kernels = !f.unfused;
  auto model = std::make_unique<nn::Transformer>(config, 0);
  model->to(device);
  // The peak before the clock starts: the CPU's is measured (a quarter second).
  const train::PeakFlops peak =
      f.peak_tflops > 0 ? train::PeakFlops{f.peak_tflops * 1e12, "as --peak-tflops sets it"}
                        : train::hardware_peak(device, autocast ? "bf16" : "f32", f.threads);
  std::printf("# mfu against %s, %s\n", train::format_flops(peak.flops).c_str(), peak.what.c_str());
  const Result r = train(*model, f, device, autocast);

  std::vector<double> times = r.step_seconds;
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  auto median_of = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const int64_t params = model->num_parameters();
  const double tokens_per_s = double(f.batch * config.max_seq_len) / median;
  std::printf(
      "spmd device=%s config=%s threads=%d autocast=%s batch=%lld params=%lld "
      "tokens_per_s=%.0f step_ms=%.2f min_step_ms=%.2f peak_rss_mb=%.1f fused=%d",
      f.device.c_str(), f.config.c_str(), f.threads, autocast ? "bf16" : "none", (long long)f.batch,
      (long long)params, tokens_per_s, median * 1e3, times[0] * 1e3, peak_rss_mb(),
      int(!f.unfused));
  if (device.is_cpu()) {
    const cpu::HostMemoryStats host = cpu::host_memory_stats();
    std::printf(" peak_alloc_mb=%.1f cached_mb=%.1f", double(host.peak_allocated) / (1 << 20),
                double(host.cached) / (1 << 20));
  }
  if (device.is_cuda())
    std::printf(" peak_mem_mb=%.0f", double(cuda::max_memory_allocated(0)) / (1 << 20));
  const double flops = train::flops_per_token(config) * tokens_per_s;
  std::printf(" tflops=%.4f mfu=%.3f", flops / 1e12,
              peak.flops > 0 ? flops / peak.flops : std::nan(""));
  std::printf(
      " forward_ms=%.2f backward_ms=%.2f optimizer_ms=%.2f loss_first=%.4f loss_last=%.4f\n",
      median_of(r.phase_ms[0]), median_of(r.phase_ms[1]), median_of(r.phase_ms[2]), r.loss_first,
      r.loss_last);
  if (f.profile_top > 0) {
    double sum = 0;
    for (double s : r.step_seconds) sum += s;
    print_top_ops(f, sum / double(r.step_seconds.size()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{
      "Tokens per second of a GPT-2 training step (f32 on the CPU, bf16 autocast on CUDA)."};
  app.add_option("--config", f.config, "tiny, small or gpt2 (124M)")
      ->check(CLI::IsMember({"tiny", "small", "gpt2"}));
  app.add_option("--device", f.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--autocast", f.autocast, "auto (bf16 on cuda), bf16 or none")
      ->check(CLI::IsMember({"auto", "bf16", "none"}));
  app.add_option("--threads", f.threads, "CPU threads")->check(spmd::flags::count(1, 1024));
  app.add_option("--steps", f.steps, "timed steps")->check(spmd::flags::count(1));
  app.add_option("--warmup", f.warmup, "untimed steps first")->check(spmd::flags::count(0));
  app.add_option("--batch", f.batch, "sequences per batch")->check(spmd::flags::count(1));
  app.add_flag("--unfused", f.unfused, "run the unfused compositions the fused kernels replace");
  app.add_option("--peak-tflops", f.peak_tflops, "the device's peak, for the MFU")
      ->check(spmd::flags::positive());
  app.add_option("--profile-top", f.profile_top,
                 "profile the timed steps; print the N ops of largest self time")
      ->check(spmd::flags::count(0));
  bool info_only = false;
  app.add_flag("--info", info_only, "print the CPU, capability and BLAS lines only");
  CLI11_PARSE(app, argc, argv);
  if (info_only) {
    std::printf("# cpu: %s\n# blas: %s\n# %s\n", cpu::describe_cpu().c_str(),
                cpu::describe_blas().c_str(), cpu::describe_bf16_gemm().c_str());
    return 0;
  }
  try {
    run(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spmd-bench-train: %s\n", e.what());
    return 1;
  }
  return 0;
}
