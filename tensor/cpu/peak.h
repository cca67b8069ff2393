// The CPU's peak arithmetic rate, the number a datasheet would print, found
// by measuring rather than by a table of CPU models:
//
//   peak f32 FLOP/s per core = f32 lanes x 2 (an FMA is a multiply and an add)
//                              x FMA ports x clock
//
// - lanes: the widest vector this CPU runs FMAs on (cpu_id()): 16 floats with
//   AVX-512 (x86-64-v4), 8 with AVX2 + FMA (x86-64-v3), 4 otherwise;
// - the clock: a chain of dependent integer adds, one cycle each, timed;
// - FMA ports: a loop of independent FMAs on enough registers to hide their
//   latency, timed, its rate over lanes x clock rounded to a whole number.
//   Zen 4 runs a 512-bit FMA as two 256-bit halves: 1 port of 16 lanes; Zen 5
//   and Xeons with two FMA units: 2.
//
// bf16 doubles that where the CPU has AVX512_BF16 (vdpbf16ps: two bf16
// products summed into each f32 lane per instruction); elsewhere bf16 has no
// faster arithmetic than f32 and its peak is the f32 one. Not counted: AMX
// (an Intel Xeon's tile unit, many times that), which cpu_id() reports but
// which is not measured here; on a CPU with AMX the bf16 peak is low and an
// MFU against it high.
//
// The clock is that of one busy core; with every core busy, or under heavy
// AVX-512 on some Xeons, the CPU may run slower, and the peak is then a
// little above what it can reach. Per rank, the peak is per core x the
// threads the rank runs.
#pragma once

namespace spmd::cpu {

struct CpuPeak {
  double clock_hz = 0;    // the sustained clock of one busy core, measured
  int lanes = 0;          // f32 lanes of a vector FMA: 16, 8 or 4
  int fma_ports = 0;      // vector FMAs retired per cycle (measured, rounded; at least 1)
  bool bf16_dot = false;  // AVX512_BF16: two bf16 products per f32 lane
  double fma_flops = 0;   // the FMA loop's measured rate, FLOP/s on one core

  double f32_per_core() const { return double(lanes) * 2 * fma_ports * clock_hz; }
  double bf16_per_core() const { return (bf16_dot ? 2 : 1) * f32_per_core(); }
};

// This CPU's peak, measured at the first call on the calling thread (about a
// quarter of a second) and the same for the rest of the process.
const CpuPeak& cpu_peak();

// The measurements cpu_peak() is made of, each the best of a few runs of
// ~20 ms on the calling thread.
// Cycles per second of a chain of dependent adds.
double measure_clock_hz();
// FLOP/s of independent `lanes`-wide FMAs (2 FLOPs per lane each).
// REQUIRES: lanes is fma_lanes() or less, one of 16, 8, 4.
double measure_fma_flops(int lanes);
// The widest FMA this CPU runs, in f32 lanes: 16, 8 or 4.
int fma_lanes();

}  // namespace spmd::cpu
