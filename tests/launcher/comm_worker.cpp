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
//   --timeout-ms T   the group's timeout (default 60000)
//   --tag T          ignored: a marker for finding this process by its command line
//
// A rank whose collective fails prints "FAILED: <error>" and exits 1.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "parallel/comm/init.h"
#include "tensor/factory.h"

using namespace spmd;

int main(int argc, char** argv) {
  int kill_rank = -1, sleep_rank = -1;
  long timeout_ms = 60000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--kill-rank") kill_rank = std::atoi(argv[i + 1]);
    if (a == "--sleep-rank") sleep_rank = std::atoi(argv[i + 1]);
    if (a == "--timeout-ms") timeout_ms = std::atol(argv[i + 1]);
  }
  try {
    dist::InitOptions init;
    init.timeout = std::chrono::milliseconds(timeout_ms);
    auto g = dist::init_process_group(init);
    const int rank = g->rank();
    g->barrier().wait();
    g->all_reduce(ops::ones({100}, {DType::kF32})).wait();
    if (rank == sleep_rank) {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    const int64_t n = kill_rank >= 0 ? (8 << 20) : 1000;
    dist::Work w = g->all_reduce(ops::ones({n}, {DType::kF32}));
    if (rank == kill_rank) ::kill(::getpid(), SIGKILL);
    w.wait();
    dist::destroy_process_group(g);
    std::printf("DONE rank %d\n", rank);
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    std::fflush(stdout);
    return 1;
  }
  return 0;
}
