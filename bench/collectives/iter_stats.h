// Per-iteration statistics (spmd-bench -I, nccl-tests' -I): from each timed
// call's duration, the fastest and slowest call, the mean, the 50th, 95th
// and 99th percentiles and the coefficient of variation.
//
// As nccl-tests takes them: the 50th percentile is the middle duration (the
// upper of the two for an even count); the 95th and 99th are nearest-rank,
// the ceil(n·p/100)-th smallest, so with fewer than 100 calls the 99th is the
// slowest. The standard deviation is the population's (divided by n).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace spmd::bench {

struct IterStats {
  double min = 0, max = 0, avg = 0, p50 = 0, p95 = 0, p99 = 0, stdev = 0;  // same unit as the input
  double cv_pct() const { return avg > 0 ? 100 * stdev / avg : 0; }
};

// The k-th percentile (0 < k <= 100) of sorted values, nearest-rank.
inline double nearest_rank(const std::vector<double>& sorted, int k) {
  const size_t n = sorted.size();
  const size_t rank = (n * size_t(k) + 99) / 100;  // ceil(n·k/100), at least 1
  return sorted[std::min(n, std::max<size_t>(rank, 1)) - 1];
}

// REQUIRES: !times.empty().
inline IterStats iter_stats(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  IterStats s;
  s.min = times.front();
  s.max = times.back();
  s.p50 = times[times.size() / 2];
  s.p95 = nearest_rank(times, 95);
  s.p99 = nearest_rank(times, 99);
  double sum = 0;
  for (double t : times) sum += t;
  s.avg = sum / double(times.size());
  double var = 0;
  for (double t : times) var += (t - s.avg) * (t - s.avg);
  s.stdev = std::sqrt(var / double(times.size()));
  return s;
}

}  // namespace spmd::bench
