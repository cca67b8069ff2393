// What the training benchmarks (ddp_bench, tp_bench, pp_bench) report of a
// run besides its speed: the median of the timed steps, the process's
// peak resident memory and the CPU time it has used.
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

// The CPU time (user and system, every thread) this process has used, in
// seconds (getrusage). A step's CPU time beside its wall time tells a
// machine whose other jobs took the cores (wall well above CPU) from one
// that was free (about equal, for a rank that computes without waiting).
inline double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto s = [](const timeval& t) { return double(t.tv_sec) + double(t.tv_usec) / 1e6; };
  return s(usage.ru_utime) + s(usage.ru_stime);
}

}  // namespace spmd::bench
