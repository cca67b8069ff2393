// Which vector ISA the CPU backend's hot loops run with, as PyTorch's CPU
// capability dispatch. The elementwise, reduction, norm, softmax, cross-
// entropy, RoPE and attention kernels (the files kernels.h lists) are
// compiled once per capability into a CpuBackend of their own:
//   avx2     x86-64-v3: AVX2, FMA, F16C (x86 CPUs since 2013-2015)
//   avx512   x86-64-v4: AVX-512 F, BW, CD, DQ, VL, 16 floats a register
//   default  the library's own flags, on a build without x86 flags
// At the first op the best capability this CPU runs is chosen from cpuid,
// unless SPMD_CPU_CAPABILITY names one (default, avx2 or avx512). Results
// are the same bits under avx2 and avx512, except where a float sum runs in
// another order (reductions, norms, softmax, attention); default has no FMA
// and rounds each multiply-add twice.
//
// Not here: the GEMMs, which OpenBLAS dispatches by itself (blas.h).
#pragma once

#include <string>
#include <vector>

namespace spmd {

class Backend;

namespace cpu {

enum class CpuCapability { kDefault, kAvx2, kAvx512 };

// "default", "avx2" or "avx512".
const char* capability_name(CpuCapability c);

// What cpuid says about this CPU.
struct CpuId {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD"
  std::string model;   // the brand string: "Intel(R) Xeon(R) Processor"
  int family = 0, model_number = 0;
  bool x86_64_v3 = false;  // AVX, AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE
  bool x86_64_v4 = false;  // and AVX-512 F, BW, CD, DQ, VL, with the OS saving zmm state
  // bf16 arithmetic (tensor/cpu/peak.h): AVX512_BF16's vdpbf16ps (two bf16
  // products summed into each f32 lane; only with x86_64_v4), and AMX's bf16
  // tile products (the CPU has them; the OS must still grant the tile state).
  bool avx512_bf16 = false;
  bool amx_bf16 = false;
};
const CpuId& cpu_id();

// The capabilities this build has kernels for and this CPU can run, worst first.
std::vector<CpuCapability> available_capabilities();

// The capability the CPU ops run with: SPMD_CPU_CAPABILITY when set, else the
// last of available_capabilities(). Throws InvalidArgument when the variable
// names an unknown capability or one that is not available here.
CpuCapability cpu_capability();

// Makes later CPU ops run with `c` (for tests and benchmarks that compare
// capabilities in one process).
// REQUIRES: no CPU op is running; `c` is one of available_capabilities()
// (throws InvalidArgument otherwise).
void set_cpu_capability(CpuCapability c);

// One line for benchmark headers: "Intel(R) Xeon(R) Processor (family 6 model
// 207), kernels avx512 (available: avx2 avx512)".
std::string describe_cpu();

// The CPU backend of capability c (nullptr when this build has none).
Backend* capability_backend(CpuCapability c);

}  // namespace cpu
}  // namespace spmd
