// The TCP side's knobs: where the host backend switches from
// latency-optimal algorithms to bandwidth-optimal ones, how finely the rings
// pipeline, and how a waiting rank spins. Read once from the environment by
// the backend (../host/) and lent to every algorithm through its Context.
// The shared-memory paths have their own (../shm/tuning.h). The defaults were
// chosen on loopback (docs/measurements/comm.md); each can be overridden by
// an environment variable of the same name in capitals
// (SPMD_TCP_CHUNK_BYTES=...) to explore another machine.
#pragma once

#include <chrono>
#include <cstddef>

namespace spmd::dist::tcp {

// How a thread that waits for bytes waits: it pumps its sockets without
// sleeping for up to `budget` without progress (restarted whenever a byte
// moves), handing its core to another ready thread after each idle round
// when `yield`; then it sleeps in poll(). A zero budget sleeps at once.
struct SpinPolicy {
  std::chrono::microseconds budget{0};
  bool yield = true;
};

// A spinning core's hint that it waits (x86's pause: the loop leaves the
// pipeline to the other hyperthread, and exits without a memory-order
// misprediction when the line changes).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// The first moment of a wait on a peer's store to shared memory: looks at
// `ready` up to `polls` times, pausing between looks, with no clock read and
// no yield. A peer in step stores within a cache line's trip between cores
// (about 0.1 us), well inside a yield's system call; the caller's bounded
// spin, which reads the clock and may yield, follows when this gives up.
template <class Ready>
bool poll_hot(Ready&& ready, int polls) {
  for (int i = 0; i < polls; ++i) {
    if (ready()) return true;
    cpu_relax();
  }
  return ready();
}
// poll_hot's default: 0.7 us of pauses on the Xeon of docs/shm.md (23 ns a
// pause); the pause's latency differs between cores (about 10 cycles before
// Skylake, about 140 since), so up to about 2 us on others.
inline constexpr int kHotPolls = 32;

// `value`, or the integer in the environment variable `name` when it is set.
// Throws InvalidArgument naming the variable when it is not an integer >= min.
long long knob_from_env(const char* name, long long value, long long min);
// The same, in place, for a knob of any integer type (../shm/tuning.cpp too).
template <class T>
void override_from_env(const char* name, T& value, long long min) {
  value = T(knob_from_env(name, (long long)value, min));
}

struct Tuning {
  // all_reduce below this many bytes uses recursive doubling, above it the ring.
  size_t small_all_reduce_bytes = 64 << 10;
  // broadcast and reduce below this use binomial trees, above it pipelined chains.
  size_t small_rooted_bytes = 64 << 10;
  // The pipeline's unit: the bytes a ring or chain moves per step.
  size_t chunk_bytes = 256 << 10;
  // Chunks posted ahead of the one being reduced.
  int window = 4;
  // The hierarchical collectives' pipeline unit (hierarchical.h): the bytes
  // of the buffer each tick moves.
  size_t hierarchical_piece_bytes = 2 << 20;
  // SO_SNDBUF of every mesh socket (the kernel doubles it); 0 leaves it to
  // the kernel's autotuning. A small send buffer makes each rank alternate
  // between writing and reading in small steps, so the bytes it reads are
  // still in cache, which beats the autotuned buffers on loopback
  // (docs/measurements/comm.md). The receive buffer is left to autotuning:
  // capping it caps TCP's window.
  size_t send_buffer_bytes = 256 << 10;
  // How long a waiting rank keeps polling its sockets without sleeping
  // (non-blocking reads and writes) before it sleeps in poll(), restarted
  // whenever a byte moves (SpinPolicy), and whether each idle round yields
  // the core. The one exception to "a waiting rank never spins", and bounded:
  // waking a sleeping thread costs several times a loopback message. The
  // defaults (docs/comm.md): when this host's ranks (LOCAL_WORLD_SIZE) are
  // known, a spin that yields each idle round, of kSpinMicros when they do
  // not outnumber its hardware threads and proportionally less when they do
  // (4 ranks on 2 threads: 25 us); no spin when they are unknown.
  int spin_us = 0;
  bool spin_yield = true;
  static constexpr int kSpinMicros = 50;
  SpinPolicy spin() const { return {std::chrono::microseconds(spin_us), spin_yield}; }
  // How long a launched collective (or point-to-point operation) waits for
  // a thread to wait on it (and run it itself, with no thread hand-off)
  // before the group's worker (or engine) thread starts it
  // (../host/collective_queue.h, p2p.h): how late one that nobody waits on starts,
  // and, in a stream of collectives, about how often the worker wakes up for
  // nothing. 0 starts every collective on the worker at once.
  int start_after_us = 1000;
  // The defaults, overridden by SPMD_TCP_SMALL_ALL_REDUCE_BYTES,
  // SPMD_TCP_SMALL_ROOTED_BYTES, SPMD_TCP_CHUNK_BYTES, SPMD_TCP_WINDOW,
  // SPMD_TCP_HIERARCHICAL_PIECE_BYTES, SPMD_TCP_SEND_BUFFER_BYTES, SPMD_TCP_SPIN_US,
  // SPMD_TCP_SPIN_YIELD (0 or 1) and SPMD_TCP_START_AFTER_US.
  static Tuning from_env();
  // The spin default for `local_ranks` ranks on a host of `hardware_threads`
  // (local_ranks <= 0: unknown, no spin).
  static SpinPolicy default_spin(int local_ranks, int hardware_threads);
};

}  // namespace spmd::dist::tcp
