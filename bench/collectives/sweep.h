// The measurement itself, as nccl-tests makes it: for each size, `warmup`
// calls, then `iters` calls timed together, each waited before the next is
// issued (a CPU program's use, and what the peers' blocking calls do), then
// `checks` more calls on known inputs whose results every rank checks.
// The time of a row is the mean over ranks of each rank's time per call
// (or rank 0's, the fastest's or the slowest's: -a); #wrong is the sum over
// ranks of the elements that differed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "bench/collectives/cases.h"
#include "bench/collectives/options.h"

namespace spmd::bench {

struct Row {
  OpKind op = OpKind::kAllReduce;
  size_t size_bytes = 0;
  size_t count = 0;
  DType dtype = DType::kF32;
  std::optional<dist::ReduceOp> redop;  // none for ops that do not reduce
  int root = -1;                        // -1 for ops without a root
  double time_us = 0;
  double algbw = 0;  // GB/s (1e9 bytes per second)
  double busbw = 0;
  int64_t wrong = 0;
};

// Runs the whole sweep of `o` on `group` (collective: every rank calls it)
// and hands each finished row to `on_row` (on every rank).
// Tensors live on `device` (the CPU, or this rank's GPU).
void run_sweep(dist::ProcessGroup& group, const BenchOptions& o, Device device,
               const std::function<void(const Row&)>& on_row);

// The rows a sweep will produce, for progress and planning.
size_t count_rows(const BenchOptions& o, int world_size);

}  // namespace spmd::bench
