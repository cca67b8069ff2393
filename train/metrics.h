// spmd-train's metrics per step (trainer.h lists them): one JSON line per
// step per rank in <run_folder>/metrics_rank<R>.jsonl, and on rank 0 a
// console line every metrics.log_every steps (and on the last step and the
// eval steps). MFU is the model's FLOPs per step (train/flops.h) over what
// every rank's peak allows: metrics.peak_tflops, or the hardware's peak for
// training.mixed_precision (the CPU's measured, a GPU's datasheet figure);
// gemm_mfu is the same FLOPs over an f32 GEMM measured here, the ceiling
// the BLAS reaches. A step's time, communication wait and memory are taken
// when its loss is known, before any eval or checkpoint. A step that saves
// writes its line before the save, and the save a line of its own after
// it ({"step", "checkpoint_ms", "checkpoint_bytes"}, and
// "checkpoint_write_ms" for an asynchronous save, whose line is written
// once the training thread has waited for it, at the next save or the
// run's end): a process that dies after the save has made the step
// permanent has logged it.
#pragma once

#include <chrono>
#include <fstream>
#include <memory>
#include <optional>
#include <vector>

#include "autograd/nn/transformer.h"
#include "parallel/comm/process_group.h"
#include "train/config.h"

namespace spmd::train {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0, grad_norm = 0, lr = 0;
  double step_s = 0;                        // from begin_step to end_step
  double comm_wait_ms = 0;                  // blocked in the groups' collectives in that time
  int64_t mem_allocated = 0, mem_peak = 0;  // bytes, this rank's allocator
  std::optional<double> val_loss;           // on eval steps
};

class MetricsLog {
 public:
  // Opens this rank's file (appending when the run resumed at a step > 0),
  // finds the peak and measures the GEMM ceiling, and on rank 0 says what
  // mfu and gemm_mfu are measured against.
  MetricsLog(const TrainConfig& config, const nn::TransformerConfig& model, const Device& device,
             int rank, int world_size, bool resumed);

  // A step begins: its clock starts, the groups' statistics and this
  // rank's peak memory are reset.
  void begin_step(const std::vector<std::shared_ptr<dist::ProcessGroup>>& groups);

  // The step's loss is known: its time, the groups' wait and the memory.
  StepMetrics end_step(int64_t step, double loss, double grad_norm, double lr,
                       const std::vector<std::shared_ptr<dist::ProcessGroup>>& groups) const;

  // Writes the step's line, and prints it on rank 0 when it is a log step
  // (or `eval`, or the last).
  void write(const StepMetrics& m);

  // Writes the line of the save after `step`: its time (the step's stall)
  // and this rank's bytes; an asynchronous save adds the writer's time and
  // the bytes of the staging buffers it was copied into.
  void write_checkpoint(int64_t step, double ms, int64_t bytes,
                        std::optional<double> write_ms = std::nullopt,
                        std::optional<int64_t> staged_bytes = std::nullopt);

 private:
  Device device_;
  int rank_, world_size_;
  int64_t log_every_, steps_;
  std::ofstream file_;
  double tokens_per_step_, flops_per_step_;
  double peak_, gemm_;  // FLOP/s per rank: mfu's and gemm_mfu's
  std::chrono::steady_clock::time_point start_;
};

}  // namespace spmd::train
