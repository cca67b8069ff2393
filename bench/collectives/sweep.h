// The measurement itself, as nccl-tests makes it. For each size, each
// placement the op offers (out of place, then in place) is a column set of
// its own: `warmup` calls, a barrier, then `iters` calls timed together
// (issued at once and waited together, or each waited: -z), then up to
// `checks` more calls on known inputs whose results every rank checks (the
// first check that finds a wrong value ends them, as in nccl-tests).
//
// A cell's time is the mean over ranks of each rank's time per call (or rank
// 0's, the fastest's or the slowest's: -a); #wrong is the sum over ranks of
// the elements that differed. With -I each call's duration is the time from
// the previous call's completion (or the start) to its own, taken as the
// maximum over ranks per call, as nccl-tests' per-iteration report does.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/collectives/cases.h"
#include "bench/collectives/iter_stats.h"
#include "bench/collectives/options.h"

namespace spmd::bench {

// One column set of a row: one placement's figures.
struct Cell {
  double time_us = 0;
  double algbw = 0;  // GB/s (1e9 bytes per second)
  double busbw = 0;
  std::optional<int64_t> wrong;  // none when the values were not checked (-c 0)
  int failed_checks = 0;         // ranks whose check found a wrong value
  // -I: each call's duration (max over ranks, us), their statistics, and
  // each rank's own durations.
  std::vector<double> iter_us;
  std::optional<IterStats> iter;
  std::vector<std::vector<double>> rank_iter_us;
  // The algorithm that ran the timed calls on this rank (Row::algorithm).
  std::string algorithm;
};

struct Row {
  OpKind op = OpKind::kAllReduce;
  size_t size_bytes = 0;
  size_t count = 0;
  DType dtype = DType::kF32;
  std::optional<dist::ReduceOp> redop;         // none for ops that do not reduce
  int root = -1;                               // -1 for ops without a root
  std::optional<Cell> out_of_place, in_place;  // none where spmd's API has no such form
  // The algorithm that ran its timed calls on this rank, as the backend
  // names it (ProcessGroup::last_algorithm: "ring", "hierarchical", ...);
  // "" when it does not say, and for sendrecv.
  std::string algorithm;
};

// Runs the whole sweep of `o` on `group` (collective: every rank calls it)
// and hands each finished row to `on_row` (on every rank).
// Tensors live on `device` (the CPU, or this rank's GPU).
void run_sweep(dist::ProcessGroup& group, const BenchOptions& o, Device device,
               const std::function<void(const Row&)>& on_row);

// The rows a sweep will produce, for progress and planning.
size_t count_rows(const BenchOptions& o, int world_size);

}  // namespace spmd::bench
