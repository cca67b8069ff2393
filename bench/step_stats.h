// What the training benchmarks (ddp_bench, tp_bench, pp_bench) report of a
// run besides its speed: the median of the timed steps, and the process's
// peak resident memory.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <vector>

namespace spmd::bench {

// The middle value (the upper one of an even count). REQUIRES: v is not empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The most resident memory this process has had, in MiB (getrusage's ru_maxrss).
inline double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;
}

}  // namespace spmd::bench
