// The CPU's peak (tensor/cpu/peak.h) against what the machine says of
// itself and against its own parts: the clock against /proc/cpuinfo (and
// cpufreq's highest clock where there is one), the lanes against cpuid, the
// peak against lanes x 2 x ports x clock, and the FMA loop, measured again,
// never faster than that peak. And the GPU datasheet table
// (tensor/gpu_peak.h) against the names CUDA gives.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "tensor/cpu/capability.h"
#include "tensor/cpu/peak.h"
#include "tensor/gpu_peak.h"

using namespace spmd;

namespace {

// The highest "cpu MHz" of /proc/cpuinfo in Hz, 0 when there is none. A
// hypervisor states its nominal clock there; bare metal each core's current
// one, so an idle core's reads low and the highest is the busy core's.
double cpuinfo_hz() {
  std::ifstream in("/proc/cpuinfo");
  double hz = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("cpu MHz", 0) != 0) continue;
    hz = std::max(hz, std::stod(line.substr(line.find(':') + 1)) * 1e6);
  }
  return hz;
}

// The kernel's highest clock for CPU 0 (cpufreq's cpuinfo_max_freq) in Hz, 0
// when it has none (most virtual machines).
double cpufreq_max_hz() {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0;
  return in >> khz ? khz * 1e3 : 0;
}

}  // namespace

TEST_CASE("cpu_peak: lanes x 2 x FMA ports x a measured clock", "[tensor][peak]") {
  const cpu::CpuPeak& p = cpu::cpu_peak();
  INFO(cpu::cpu_id().model << ": " << p.clock_hz / 1e9 << " GHz, " << p.lanes << " lanes, "
                           << p.fma_ports << " FMA ports, FMA loop " << p.fma_flops / 1e9
                           << " GFLOP/s");
  // A clock no CPU of the last twenty years runs outside, and the kernel's
  // own figure within a factor of 2 (turbo above it, a busy host below).
  CHECK(p.clock_hz > 0.5e9);
  CHECK(p.clock_hz < 7e9);
  if (const double stated = cpuinfo_hz(); stated > 0) {
    CHECK(p.clock_hz > stated / 2);
    CHECK(p.clock_hz < stated * 2);
  }
  if (const double max = cpufreq_max_hz(); max > 0) CHECK(p.clock_hz < 1.1 * max);
  // The lanes follow cpuid; the ports are one or two vector FMAs a cycle.
  const cpu::CpuId& id = cpu::cpu_id();
  CHECK(p.lanes == (id.x86_64_v4 ? 16 : id.x86_64_v3 ? 8 : 4));
  CHECK(p.lanes == cpu::fma_lanes());
#if defined(__x86_64__)
  CHECK((p.fma_ports == 1 || p.fma_ports == 2));
#else
  CHECK((p.fma_ports >= 1 && p.fma_ports <= 4));
#endif
  CHECK(p.f32_per_core() == double(p.lanes) * 2 * p.fma_ports * p.clock_hz);
  CHECK(p.bf16_per_core() == (id.avx512_bf16 ? 2 : 1) * p.f32_per_core());
  CHECK(p.bf16_dot == id.avx512_bf16);
  // The FMA loop, at start and measured again, within 15% above the peak
  // (rounding the ports may only raise it), and above half of it.
  for (const double rate : {p.fma_flops, cpu::measure_fma_flops(p.lanes)}) {
    CHECK(rate <= 1.15 * p.f32_per_core());
    CHECK(rate > 0.5 * p.f32_per_core());
  }
  // Narrower vectors run at most as fast per lane.
  if (p.lanes > 4) CHECK(cpu::measure_fma_flops(4) <= 1.15 * p.f32_per_core() / (p.lanes / 4));
  CHECK_THROWS_WITH(cpu::measure_fma_flops(32),
                    Catch::Contains("measure_fma_flops: 32 lanes; this CPU runs 4 to"));
  // Measured once: the same object at every call.
  CHECK(&cpu::cpu_peak() == &p);
}

TEST_CASE("datasheet_peak: a GPU's dense peak by the name CUDA gives it", "[tensor][peak]") {
  const auto h100 = cuda::datasheet_peak("NVIDIA H100 80GB HBM3");
  REQUIRE(h100);
  CHECK(h100->model == "H100 SXM");
  CHECK(h100->bf16 == 989e12);
  CHECK(h100->tf32 == 494.5e12);
  CHECK(h100->f32 == 67e12);
  CHECK(cuda::datasheet_peak("NVIDIA H200")->bf16 == 989e12);
  CHECK(cuda::datasheet_peak("NVIDIA H100 PCIe")->bf16 == 756e12);
  CHECK(cuda::datasheet_peak("NVIDIA H100 NVL")->model == "H100 NVL");
  // CUDA's A100 names: dashes between the words, PCIE in capitals.
  CHECK(cuda::datasheet_peak("NVIDIA A100-SXM4-80GB")->bf16 == 312e12);
  CHECK(cuda::datasheet_peak("NVIDIA A100-PCIE-40GB")->tf32 == 156e12);
  // A word, not a prefix: an A10 is not an A100, an L4 not an L40S.
  CHECK(cuda::datasheet_peak("NVIDIA A10")->bf16 == 125e12);
  CHECK(cuda::datasheet_peak("NVIDIA L4")->bf16 == 121e12);
  CHECK(cuda::datasheet_peak("NVIDIA L40S")->bf16 == 362e12);
  CHECK_FALSE(cuda::datasheet_peak("NVIDIA GeForce RTX 4090"));
  CHECK_FALSE(cuda::datasheet_peak("NVIDIA H1000"));
  CHECK_FALSE(cuda::datasheet_peak(""));
}
