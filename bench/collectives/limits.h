// spmd-bench --limits: what this machine allows any TCP collective, measured
// with nothing but the kernel and memcpy, so the tables of a sweep can be read
// against them (docs/bench.md):
//
//   - loopback TCP bandwidth between two processes, one way and both ways at
//     once (a ring rank sends and receives together), moving data between
//     64 MiB buffers with blocking calls and the kernel's socket buffers:
//     each byte is copied twice by the CPU (into the socket buffer, and out
//     of it);
//   - how busy each side's core is in that one-way stream (on loopback the
//     sender's calls also run the receiving half of TCP);
//   - one long stream as the TCP backend moves a 2-rank broadcast (256 KiB
//     send buffer, spinning non-blocking calls), from 64 MiB buffers
//     (memory) and 4 MiB ones (cache): the ceiling of a single TCP stream;
//   - the one-way latency of a small message: ping-pong through blocking
//     reads, through poll() (how a sleeping rank waits), and through spinning
//     non-blocking reads (how MPI waits);
//   - memcpy bandwidth between two 64 MiB buffers, one thread.
// Each figure is the best of a few repetitions (on a shared machine other
// processes can only add time).
#pragma once

#include <cstdio>

namespace spmd::bench {

// Measures and prints the limits. Returns 0, or 1 when a measurement failed.
int print_limits(std::FILE* out);

}  // namespace spmd::bench
