// The CPU's peak (peak.h): three small timed loops on the calling thread.
// The clock is a chain of dependent adds, each waiting for the one before,
// so the chain runs one add a cycle whatever else the core could do. The
// FMA loops keep many independent accumulators (16 on AVX-512's 32
// registers, 12 on AVX2's 16) so that latency x ports FMAs are always in
// flight: the loop then runs at the FMA units' throughput, not their latency.
// Each loop is compiled for its ISA with a target attribute and chosen from
// cpu_id(), as the library itself may be built for an older baseline. Runs
// are timed by the thread's CPU clock, not the wall clock: on a machine
// busy with other processes a run that loses the core for part of its time
// would read as a slower core (ctest -j2 of the multi-process tests on 2
// cores read 60% of the peak that way).
#include "tensor/cpu/peak.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "runtime/error.h"
#include "tensor/cpu/capability.h"

namespace spmd::cpu {
namespace {

constexpr double kRunSeconds = 0.02;  // one timed run
constexpr int kRepeats = 5;           // the best of these

volatile float g_sink;  // keeps the loops' results alive

// This thread's CPU time in seconds: it stands still while the thread waits
// for a core.
double thread_seconds() {
  timespec ts{};
  SPMD_CHECK(clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0,
             "cpu_peak: clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Seconds of this thread's CPU time `run(n)` takes.
template <typename Run>
double seconds(const Run& run, int64_t n) {
  const double start = thread_seconds();
  run(n);
  return thread_seconds() - start;
}

// The best rate of `run(n)`, which does n units of work: n grows until a run
// takes a millisecond, is scaled to kRunSeconds, then timed kRepeats times.
template <typename Run>
double best_rate(const Run& run) {
  int64_t n = 256;
  double took = seconds(run, n);
  while (took < 1e-3) took = seconds(run, n *= 8);
  n = std::max<int64_t>(1, int64_t(double(n) * kRunSeconds / took));
  double best = 0;
  for (int i = 0; i < kRepeats; ++i) best = std::max(best, double(n) / seconds(run, n));
  return best;
}

// n x 100 dependent adds of a register (not an immediate: some cores fold
// small immediates at rename, in no cycle at all).
constexpr int kAddsPerIteration = 100;
void add_chain(int64_t n) {
  uint64_t x = 0, one = 1;
  asm volatile("" : "+r"(one));  // unknown to the compiler: no folding
  for (int64_t i = 0; i < n; ++i) {
#if defined(__x86_64__)
    asm volatile(".rept 100\n\taddq %1, %0\n\t.endr" : "+r"(x) : "r"(one));
#elif defined(__aarch64__)
    asm volatile(".rept 100\n\tadd %0, %0, %1\n\t.endr" : "+r"(x) : "r"(one));
#else
#pragma GCC unroll 100
    for (int k = 0; k < kAddsPerIteration; ++k) {
      x += one;
      asm volatile("" : "+r"(x));  // each add its own instruction, in order
    }
#endif
  }
  g_sink = float(x);
}

// acc = acc * a + b on K independent accumulators, n times; a < 1 keeps the
// values near b / (1 - a), far from overflow and denormals.
constexpr float kA = 0.999f, kB = 1e-3f;

#if defined(__x86_64__)
constexpr int kAccumulators512 = 16;
__attribute__((target("avx512f"))) void fma_loop_avx512(int64_t n) {
  const __m512 a = _mm512_set1_ps(kA), b = _mm512_set1_ps(kB);
  __m512 acc[kAccumulators512];
  for (auto& r : acc) r = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kAccumulators512; ++k) acc[k] = _mm512_fmadd_ps(acc[k], a, b);
  }
  float out[16];
  for (int k = 1; k < kAccumulators512; ++k) acc[0] = _mm512_add_ps(acc[0], acc[k]);
  _mm512_storeu_ps(out, acc[0]);
  g_sink = out[0];
}

constexpr int kAccumulators256 = 12;
__attribute__((target("avx2,fma"))) void fma_loop_avx2(int64_t n) {
  const __m256 a = _mm256_set1_ps(kA), b = _mm256_set1_ps(kB);
  __m256 acc[kAccumulators256];
  for (auto& r : acc) r = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < kAccumulators256; ++k) acc[k] = _mm256_fmadd_ps(acc[k], a, b);
  }
  float out[8];
  for (int k = 1; k < kAccumulators256; ++k) acc[0] = _mm256_add_ps(acc[0], acc[k]);
  _mm256_storeu_ps(out, acc[0]);
  g_sink = out[0];
}
#endif

// 4 lanes in the compiler's own vectors (SSE, NEON): a fused multiply-add
// where the build's flags have one, else a multiply then an add, the same
// 2 FLOPs a lane.
constexpr int kAccumulators128 = 12;
void fma_loop_128(int64_t n) {
  using V4 = float __attribute__((vector_size(16)));
  const V4 a = {kA, kA, kA, kA}, b = {kB, kB, kB, kB};
  V4 acc[kAccumulators128];
  for (auto& r : acc) r = V4{1, 1, 1, 1};
  for (int64_t i = 0; i < n; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < kAccumulators128; ++k) acc[k] = acc[k] * a + b;
  }
  for (int k = 1; k < kAccumulators128; ++k) acc[0] += acc[k];
  g_sink = acc[0][0];
}

}  // namespace

int fma_lanes() {
  if (cpu_id().x86_64_v4) return 16;
  if (cpu_id().x86_64_v3) return 8;
  return 4;
}

double measure_clock_hz() { return kAddsPerIteration * best_rate(add_chain); }

double measure_fma_flops(int lanes) {
  SPMD_CHECK((lanes == 16 || lanes == 8 || lanes == 4) && lanes <= fma_lanes(),
             "measure_fma_flops: ", lanes, " lanes; this CPU runs 4 to ", fma_lanes());
#if defined(__x86_64__)
  if (lanes == 16) return 2.0 * 16 * kAccumulators512 * best_rate(fma_loop_avx512);
  if (lanes == 8) return 2.0 * 8 * kAccumulators256 * best_rate(fma_loop_avx2);
#endif
  return 2.0 * 4 * kAccumulators128 * best_rate(fma_loop_128);
}

const CpuPeak& cpu_peak() {
  static const CpuPeak peak = [] {
    CpuPeak p;
    p.lanes = fma_lanes();
    p.clock_hz = measure_clock_hz();
    p.fma_flops = measure_fma_flops(p.lanes);
    const double per_port = double(p.lanes) * 2 * p.clock_hz;  // one FMA a cycle
    p.fma_ports = std::max(1, int(std::lround(p.fma_flops / per_port)));
    p.bf16_dot = cpu_id().avx512_bf16;
    return p;
  }();
  return peak;
}

}  // namespace spmd::cpu
