// Reading the TCP side's knobs from the environment.
#include "parallel/comm/tcp/tuning.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "runtime/error.h"

namespace spmd::dist::tcp {
namespace {
// The threads this process may run on (its affinity mask: a container or
// taskset may allow fewer than the machine has).
int usable_hardware_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return int(std::thread::hardware_concurrency());
}

int local_world_size() {
  const char* text = std::getenv("LOCAL_WORLD_SIZE");
  return text ? std::atoi(text) : 0;
}
}  // namespace

long long knob_from_env(const char* name, long long value, long long min) {
  const char* text = std::getenv(name);
  if (!text || !*text) return value;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  SPMD_CHECK(*end == '\0' && v >= min, name, "='", text, "' is not an integer >= ", min);
  return v;
}

SpinPolicy Tuning::default_spin(int local_ranks, int hardware_threads) {
  if (local_ranks <= 0) return {};
  // Yielding each idle round lets a ready peer rank that shares the core run
  // at once, so the spin pays when the ranks outnumber the cores too; the
  // more ranks share a core, the shorter each spins.
  const int micros = kSpinMicros * std::min(1.0, double(hardware_threads) / local_ranks);
  return {std::chrono::microseconds(micros), true};
}

Tuning Tuning::from_env() {
  Tuning t;
  t.spin_us = int(default_spin(local_world_size(), usable_hardware_threads()).budget.count());
  int yield = 1;
  override_from_env("SPMD_TCP_SPIN_US", t.spin_us, 0);
  override_from_env("SPMD_TCP_SPIN_YIELD", yield, 0);
  t.spin_yield = yield != 0;
  override_from_env("SPMD_TCP_START_AFTER_US", t.start_after_us, 0);
  override_from_env("SPMD_TCP_SMALL_ALL_REDUCE_BYTES", t.small_all_reduce_bytes, 0);
  override_from_env("SPMD_TCP_SMALL_ROOTED_BYTES", t.small_rooted_bytes, 0);
  override_from_env("SPMD_TCP_CHUNK_BYTES", t.chunk_bytes, 1024);
  override_from_env("SPMD_TCP_WINDOW", t.window, 1);
  override_from_env("SPMD_TCP_HIERARCHICAL_PIECE_BYTES", t.hierarchical_piece_bytes, 1024);
  override_from_env("SPMD_TCP_SEND_BUFFER_BYTES", t.send_buffer_bytes, 0);
  return t;
}

}  // namespace spmd::dist::tcp
