// Intra-op thread count: OpenMP's, which OpenBLAS's OpenMP build shares, so
// one setting governs our loops and the GEMMs under them. And the fork rule
// of threads.h: a fork handler drops a child to one thread when its parent
// had started an OpenMP team.
#include "tensor/threads.h"

#include <omp.h>
#include <pthread.h>

#include <atomic>

#include "runtime/error.h"

namespace spmd {
namespace {

std::atomic<bool> team_started{false};       // this process has run an OpenMP team
std::atomic<bool> forked_after_team{false};  // ...in the parent: no teams here

void on_fork_in_child() {
  if (!team_started.load(std::memory_order_relaxed)) return;
  forked_after_team.store(true, std::memory_order_relaxed);
  omp_set_num_threads(1);  // our loops and OpenBLAS then never ask the dead pool
}

[[maybe_unused]] const int fork_handler = pthread_atfork(nullptr, nullptr, on_fork_in_child);

}  // namespace

void set_num_threads(int n) {
  SPMD_CHECK(n >= 1, "set_num_threads: expected at least 1 thread, got ", n);
  SPMD_CHECK(n == 1 || !forked_after_team.load(std::memory_order_relaxed), "set_num_threads(", n,
             "): this process was forked after its parent ran multi-threaded ops, and OpenMP "
             "cannot start threads here; it runs on 1 thread (fork before the first "
             "multi-threaded op to keep them)");
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

void note_thread_team() { team_started.store(true, std::memory_order_relaxed); }

}  // namespace spmd
