// MetricsLog (metrics.h): a step's numbers measured, written and printed.
#include "train/metrics.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tensor/cpu/allocator.h"
#include "tensor/cuda_api.h"
#include "tensor/threads.h"
#include "train/flops.h"

namespace spmd::train {
namespace {

using Clock = std::chrono::steady_clock;

// Time this rank spent blocked in collectives since the groups' last reset.
double wait_ms(const std::vector<std::shared_ptr<dist::ProcessGroup>>& groups) {
  uint64_t ns = 0;
  for (const auto& g : groups)
    for (const auto& c : g->stats().by_op) ns += c.wait_ns;
  return double(ns) / 1e6;
}

// This rank's allocator: the host's, or the GPU's caching allocator.
void memory_stats(const Device& device, StepMetrics& m) {
  if (device.is_cuda()) {
    m.mem_allocated = int64_t(cuda::memory_allocated(device.index));
    m.mem_peak = int64_t(cuda::max_memory_allocated(device.index));
    return;
  }
  const auto host = cpu::host_memory_stats();
  m.mem_allocated = int64_t(host.allocated), m.mem_peak = int64_t(host.peak_allocated);
}

void reset_peak_memory(const Device& device) {
  if (device.is_cuda()) {
    cuda::reset_peak_memory_stats(device.index);
  } else {
    cpu::reset_host_peak_memory();
  }
}

}  // namespace

MetricsLog::MetricsLog(const TrainConfig& config, const nn::TransformerConfig& model,
                       const Device& device, int rank, int world_size, bool resumed)
    : device_(device),
      rank_(rank),
      world_size_(world_size),
      log_every_(config.metrics.log_every),
      steps_(config.training.steps) {
  const std::string path =
      config.metrics.run_folder + "/metrics_rank" + std::to_string(rank) + ".jsonl";
  std::error_code ec;
  std::filesystem::create_directories(config.metrics.run_folder, ec);
  file_.open(path, resumed ? std::ios::app : std::ios::trunc);
  SPMD_CHECK(file_.is_open(), "metrics.run_folder = \"", config.metrics.run_folder,
             "\": cannot write ", path, " (", std::strerror(errno), ")");
  tokens_per_step_ = double(config.training.global_batch * model.max_seq_len);
  flops_per_step_ = flops_per_token(model) * tokens_per_step_;
  const int64_t n = device.is_cuda() ? 4096 : 512;
  gemm_ = measured_gemm_flops(device, n);
  PeakFlops peak =
      config.metrics.peak_tflops > 0
          ? PeakFlops{config.metrics.peak_tflops * 1e12, "as metrics.peak_tflops sets it"}
          : hardware_peak(device, config.training.mixed_precision, num_threads());
  if (peak.flops == 0)
    peak = {gemm_, peak.what + ", so the GEMM ceiling below (metrics.peak_tflops sets one)"};
  peak_ = peak.flops;
  if (rank != 0) return;
  std::printf("mfu against %s per rank, %s\n", format_flops(peak_).c_str(), peak.what.c_str());
  std::printf(
      "gemm_mfu against %s per rank, a %lld^3 f32 GEMM measured here; %.2f MFLOP per token\n",
      format_flops(gemm_).c_str(), (long long)n, flops_per_token(model) / 1e6);
}

void MetricsLog::begin_step(const std::vector<std::shared_ptr<dist::ProcessGroup>>& groups) {
  start_ = Clock::now();
  for (const auto& g : groups) g->reset_stats();
  reset_peak_memory(device_);
}

StepMetrics MetricsLog::end_step(
    int64_t step, double loss, double grad_norm, double lr,
    const std::vector<std::shared_ptr<dist::ProcessGroup>>& groups) const {
  StepMetrics m;
  m.step = step, m.loss = loss, m.grad_norm = grad_norm, m.lr = lr;
  m.step_s = std::chrono::duration<double>(Clock::now() - start_).count();
  memory_stats(device_, m);
  m.comm_wait_ms = wait_ms(groups);
  return m;
}

void MetricsLog::write(const StepMetrics& m) {
  const double achieved = flops_per_step_ / m.step_s / world_size_;  // FLOP/s per rank
  const double mfu = achieved / peak_, gemm_mfu = achieved / gemm_;
  nlohmann::json line = {{"step", m.step},
                         {"loss", m.loss},
                         {"grad_norm", m.grad_norm},
                         {"lr", m.lr},
                         {"tokens_per_s", tokens_per_step_ / m.step_s},
                         {"mfu", mfu},
                         {"gemm_mfu", gemm_mfu},
                         {"step_ms", m.step_s * 1e3},
                         {"comm_wait_ms", m.comm_wait_ms},
                         {"mem_allocated", m.mem_allocated},
                         {"mem_peak", m.mem_peak}};
  if (m.val_loss) line["val_loss"] = *m.val_loss;
  file_ << line.dump() << "\n" << std::flush;
  const bool log_step = m.step % log_every_ == 0 || m.step + 1 == steps_ || m.val_loss;
  if (rank_ != 0 || !log_step) return;
  std::printf(
      "step %5lld  loss %.4f  grad_norm %.3f  lr %.2e  %8.0f tok/s  mfu %4.1f%% (gemm %.0f%%)  "
      "%.0f ms%s\n",
      (long long)m.step, m.loss, m.grad_norm, m.lr, tokens_per_step_ / m.step_s, 100 * mfu,
      100 * gemm_mfu, m.step_s * 1e3,
      m.val_loss ? str_cat("  val_loss ", *m.val_loss).c_str() : "");
  std::fflush(stdout);
}

void MetricsLog::write_checkpoint(int64_t step, double ms, int64_t bytes,
                                  std::optional<double> write_ms,
                                  std::optional<int64_t> staged_bytes) {
  nlohmann::json line = {{"step", step}, {"checkpoint_ms", ms}, {"checkpoint_bytes", bytes}};
  if (write_ms) line["checkpoint_write_ms"] = *write_ms;
  if (staged_bytes) line["checkpoint_staged_bytes"] = *staged_bytes;
  file_ << line.dump() << "\n" << std::flush;
}

}  // namespace spmd::train
