// spmd-bench-desync: what the fingerprint ledger (parallel/comm/ledger.h)
// costs a small all_reduce. Two groups over the same ranks, one with the
// ledger on and one made with SPMD_DESYNC_CHECK=0, run the same all_reduce in
// interleaved rounds (on, off, then off, on, ...), so that drift in the
// machine's load touches both alike; the figure is the median over rounds of
// the ratio on/off of the mean time per all_reduce.
//
//   spmd-bench-desync [--ranks 2] [--elements 16] [--iters 2000] [--rounds 15] [--control]
//
// --control turns the ledger off in both groups: its ratio is what the two
// groups differ by on their own, the noise floor of the figure.
//
// It starts its own ranks (spawn()). Rank 0 prints one line per round and
//   spmd-desync ranks=2 elements=16 on_us=... off_us=... ratio_median=...
//               record_ns=... record_cold_ns=... cpu="..."
// record_ns: the ledger's own work per call (DesyncCheck::record and the
// completion mark) timed alone in one process, the best of 9 batches, a
// figure the load of a shared machine barely moves. record_cold_ns: the
// same with the caches near the core emptied before each call, nearer what
// a call costs between two collectives (its lines and code evicted).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <vector>

#include "bench/step_stats.h"
#include "parallel/comm/desync_check.h"
#include "parallel/comm/init.h"
#include "parallel/comm/process_group.h"
#include "runtime/hash_store.h"
#include "runtime/spawn.h"
#include "tensor/factory.h"

using namespace spmd;
using Clock = std::chrono::steady_clock;

using spmd::bench::median;

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// Mean microseconds per all_reduce over `iters` calls.
double time_all_reduce(dist::ProcessGroup& g, const Tensor& t, int iters) {
  const auto start = Clock::now();
  for (int i = 0; i < iters; ++i) g.all_reduce(t).wait();
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iters;
}

// Nanoseconds per DesyncCheck::record() and completed() of a small
// all_reduce, in this process alone: the work the ledger adds to each call,
// measured without the noise of a collective around it. The best of a few
// batches, so that a batch the other programs of a shared machine
// interrupted does not count.
double record_ns(int64_t elements) {
  dist::DesyncCheck check(std::make_shared<HashStore>(), "bench/", "bench", 0, 1);
  dist::CommOp op;
  op.type = dist::OpType::kAllReduce;
  op.tensor = ops::ones({elements}, {DType::kF32});
  const int batches = 9, n = 100000;
  double best = 1e30;
  uint64_t seq = 0;
  for (int b = 0; b < batches; ++b) {
    const auto start = Clock::now();
    for (int i = 0; i < n; ++i, ++seq) {
      op.seq = seq;
      check.record(op, "");
      check.completed(op.seq);
    }
    best =
        std::min(best, std::chrono::duration<double, std::nano>(Clock::now() - start).count() / n);
  }
  return best;
}

volatile char cache_walk_sink;

// The same work as record_ns(), each call after a walk over 1 MiB that
// evicts its lines from the caches nearest the core, as the collective
// between two calls of a real loop partly does (and a process sharing the
// core wholly): the median over calls, less that of an empty timed region.
double record_cold_ns(int64_t elements) {
  dist::DesyncCheck check(std::make_shared<HashStore>(), "bench/", "bench", 0, 1);
  dist::CommOp op;
  op.type = dist::OpType::kAllReduce;
  op.tensor = ops::ones({elements}, {DType::kF32});
  std::vector<char> junk(1 << 20);
  const int n = 20000;
  std::vector<double> with, without;
  uint64_t seq = 0;
  for (int i = 0; i < 2 * n; ++i) {
    for (size_t k = 0; k < junk.size(); k += 64) junk[k]++;
    const bool timed = i % 2 == 0;
    const auto start = Clock::now();
    if (timed) {
      op.seq = seq++;
      check.record(op, "");
      check.completed(op.seq);
    }
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
    (timed ? with : without).push_back(ns);
  }
  cache_walk_sink = junk[seq % junk.size()];  // read, so that the walk's stores stay
  return median(with) - median(without);
}

void run_rank(int rank, int ranks, int64_t elements, int iters, int rounds, bool control) {
  if (control) {
    ::setenv("SPMD_DESYNC_CHECK", "0", 1);
  } else {
    ::unsetenv("SPMD_DESYNC_CHECK");
  }
  auto on = dist::init_process_group({});
  std::vector<int> all(ranks);
  std::iota(all.begin(), all.end(), 0);
  ::setenv("SPMD_DESYNC_CHECK", "0", 1);  // read once, when a group is made
  auto off = on->new_group(all);
  ::unsetenv("SPMD_DESYNC_CHECK");
  Tensor t = ops::ones({elements}, {DType::kF32});
  time_all_reduce(*on, t, iters / 4);  // warm-up: connections, caches
  time_all_reduce(*off, t, iters / 4);
  std::vector<double> ratios, on_us, off_us;
  for (int r = 0; r < rounds; ++r) {
    double a = 0, b = 0;
    if (r % 2 == 0) {
      a = time_all_reduce(*on, t, iters);
      b = time_all_reduce(*off, t, iters);
    } else {
      b = time_all_reduce(*off, t, iters);
      a = time_all_reduce(*on, t, iters);
    }
    on_us.push_back(a), off_us.push_back(b), ratios.push_back(a / b);
    if (rank == 0) std::printf("round %d on_us=%.2f off_us=%.2f ratio=%.4f\n", r, a, b, a / b);
  }
  if (rank == 0) {
    std::printf(
        "spmd-desync ranks=%d elements=%lld on_us=%.2f off_us=%.2f ratio_median=%.4f "
        "record_ns=%.1f record_cold_ns=%.1f cpu=\"%s\"\n",
        ranks, (long long)elements, median(on_us), median(off_us), median(ratios),
        record_ns(elements), record_cold_ns(elements), cpu_model().c_str());
  }
  off.reset();
  dist::destroy_process_group(on);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"spmd-bench-desync: the fingerprint ledger's cost on a small all_reduce"};
  int ranks = 2, iters = 2000, rounds = 15;
  bool control = false;
  int64_t elements = 16;
  app.add_option("--ranks", ranks, "processes")->check(CLI::Range(2, 64));
  app.add_option("--elements", elements, "f32 elements per all_reduce")->check(CLI::PositiveNumber);
  app.add_option("--iters", iters, "all_reduces per round and group")
      ->check(CLI::Range(4, 10000000));
  app.add_option("--rounds", rounds, "interleaved rounds")->check(CLI::Range(1, 1001));
  app.add_flag("--control", control,
               "the ledger off in both groups: the ratio is the groups' own difference");
  CLI11_PARSE(app, argc, argv);
  try {
    spawn(ranks, [&](int rank) { run_rank(rank, ranks, elements, iters, rounds, control); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spmd-bench-desync: %s\n", e.what());
    return 1;
  }
  return 0;
}
