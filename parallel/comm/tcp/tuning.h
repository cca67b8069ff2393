// The TCP backend's knobs: where it switches from latency-optimal algorithms
// to bandwidth-optimal ones, and how finely the rings pipeline. The defaults
// were measured on loopback (docs/comm.md); each can be overridden by an
// environment variable of the same name in capitals (SPMD_TCP_CHUNK_BYTES=...)
// to explore another machine.
#pragma once

#include <cstddef>

namespace spmd::dist::tcp {

struct Tuning {
  // all_reduce below this many bytes uses recursive doubling, above it the ring.
  size_t small_all_reduce_bytes = 64 << 10;
  // broadcast and reduce below this use binomial trees, above it pipelined chains.
  size_t small_rooted_bytes = 64 << 10;
  // The pipeline's unit: the bytes a ring or chain moves per step.
  size_t chunk_bytes = 256 << 10;
  // Chunks posted ahead of the one being reduced.
  int window = 4;
  // SO_SNDBUF of every mesh socket (the kernel doubles it); 0 leaves it to
  // the kernel's autotuning. A small send buffer makes each rank alternate
  // between writing and reading in small steps, so the bytes it reads are
  // still in cache: on loopback it measured 1.6x (2 ranks, 64 MiB) to 1.9x
  // (4 ranks, 16 MiB) the all_reduce bandwidth of autotuned buffers (which
  // grow to 4 MiB). The receive buffer is left to autotuning: capping it caps
  // TCP's window.
  size_t send_buffer_bytes = 256 << 10;

  // The defaults, overridden by SPMD_TCP_SMALL_ALL_REDUCE_BYTES,
  // SPMD_TCP_SMALL_ROOTED_BYTES, SPMD_TCP_CHUNK_BYTES, SPMD_TCP_WINDOW and
  // SPMD_TCP_SEND_BUFFER_BYTES.
  static Tuning from_env();
};

}  // namespace spmd::dist::tcp
