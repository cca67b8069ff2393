// spmd_test_comm_worker: an spmd program for the launcher's diagnosis tests.
// Every rank joins through env:// (spmdrun's store), runs barrier #0 and
// all_reduce #1, then, by flag:
//
//   --kill-rank R    collective #2 is a 32 MiB all_reduce; rank R kills itself
//                    (SIGKILL) as soon as it has issued it (over shared memory
//                    two ranks finish 32 MiB in well under 20 ms, so a later
//                    kill could let the others' all_reduce succeed)
//   --sleep-rank R   rank R sleeps forever in its own code; the others call
//                    all_reduce #2 and wait in it
//   --spin-rank R    rank R spins forever in its own code (the CPU busy)
//   --stop-rank R    rank R stops itself with SIGSTOP in its own code
//   --subgroup       all_reduce #2 runs on a subgroup split from the world
//                    (every rank, group world/split0.0, where it is #0)
//   --timeout-ms T   the group's timeout (default 60000)
//   --tag T          ignored: a marker for finding this process by its command line
//
// A rank whose collective fails prints "FAILED: <error>" and exits 1.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "parallel/comm/init.h"
#include "tensor/factory.h"

using namespace spmd;

int main(int argc, char** argv) {
  int kill_rank = -1, sleep_rank = -1, spin_rank = -1, stop_rank = -1;
  bool subgroup = false;
  long timeout_ms = 60000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--subgroup") {
      subgroup = true;
      continue;
    }
    if (i + 1 == argc) break;
    ++i;
    if (a == "--spin-rank") spin_rank = std::atoi(argv[i]);
    if (a == "--stop-rank") stop_rank = std::atoi(argv[i]);
    if (a == "--kill-rank") kill_rank = std::atoi(argv[i]);
    if (a == "--sleep-rank") sleep_rank = std::atoi(argv[i]);
    if (a == "--timeout-ms") timeout_ms = std::atol(argv[i]);
  }
  try {
    dist::InitOptions init;
    init.timeout = std::chrono::milliseconds(timeout_ms);
    auto g = dist::init_process_group(init);
    const int rank = g->rank();
    g->barrier().wait();
    g->all_reduce(ops::ones({100}, {DType::kF32})).wait();
    auto group = subgroup ? g->split(0, rank) : g;
    if (rank == sleep_rank) {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    if (rank == stop_rank) ::raise(SIGSTOP);
    if (rank == spin_rank) {
      std::atomic<uint64_t> spins{0};
      for (;;) spins.fetch_add(1, std::memory_order_relaxed);
    }
    const int64_t n = kill_rank >= 0 ? (8 << 20) : 1000;
    dist::Work w = group->all_reduce(ops::ones({n}, {DType::kF32}));
    if (rank == kill_rank) ::kill(::getpid(), SIGKILL);
    w.wait();
    group.reset();
    dist::destroy_process_group(g);
    std::printf("DONE rank %d\n", rank);
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    std::fflush(stdout);
    return 1;
  }
  return 0;
}
