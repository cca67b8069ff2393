// The BLAS under the CPU backend's matrix products (matmul.cpp), and the
// kernel set ("core") OpenBLAS runs them with.
//
// Debian's OpenBLAS is a DYNAMIC_ARCH build: its library constructor reads
// cpuid before main and picks one of its cores (Haswell, SkylakeX,
// Cooperlake, Zen...). A CPU newer than its table falls back to Prescott,
// the SSE3 kernels: 0.3.21 on an Emerald Rapids Xeon (family 6 model 207)
// multiplies 4-6x slower than with its AVX-512 core. OPENBLAS_CORETYPE
// overrides the pick, but only when set before the library loads.
//
// So at start-up (a constructor in blas.cpp, which runs after OpenBLAS's
// own), when the user set no OPENBLAS_CORETYPE and the core OpenBLAS picked
// uses a narrower vector ISA than cpuid reports, spmd asks OpenBLAS to pick
// again, naming the core for this CPU: SkylakeX with AVX-512,
// Haswell (Zen on AMD) with AVX2, Sandybridge with AVX. Every spmd program,
// and every process spmdrun starts, gets it without setting anything.
#pragma once

#include <string>

namespace spmd::cpu {

struct BlasInfo {
  std::string library;    // "OpenBLAS 0.3.21", or "none (Eigen's own GEMM)"
  std::string core;       // the core OpenBLAS runs now: "SkylakeX"; empty without OpenBLAS
  std::string picked;     // the core OpenBLAS picked by itself at load time
  std::string chosen_by;  // "OpenBLAS", "OPENBLAS_CORETYPE" or "spmd"
};

// What the products run on. Checked, and the core chosen, once before main;
// the CpuBackend constructor calls it too, which links blas.cpp (and so that
// check) into every program that runs a CPU op.
const BlasInfo& blas_info();

// One line for benchmark headers: "OpenBLAS 0.3.21 core SkylakeX (spmd: OpenBLAS
// picked Prescott)".
std::string describe_blas();

// The OpenBLAS core for a CPU with this vector ISA ("SkylakeX"...), or ""
// when the core OpenBLAS reports already uses it (or is not one spmd knows).
// Exposed for the tests.
std::string better_openblas_core(const std::string& current);

}  // namespace spmd::cpu
