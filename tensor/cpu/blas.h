// The BLAS under the CPU backend's matrix products (matmul.cpp), and the
// kernel set ("core") OpenBLAS runs them with.
//
// Debian's OpenBLAS is a DYNAMIC_ARCH build: every core (Haswell, SkylakeX,
// Cooperlake, Zen...) is in the library, and its constructor reads cpuid (or
// OPENBLAS_CORETYPE) before main to pick one. Its pick is a table of CPU
// models: a CPU newer than the table gets a narrow core (0.3.21 runs SSE3
// kernels on an Emerald Rapids Xeon, AVX2 ones on an AVX-512 Zen 5), and a
// machine-wide OPENBLAS_CORETYPE set for the oldest CPU of a fleet holds the
// newest back just the same.
//
// So spmd chooses the core itself, by measurement: the cores this OpenBLAS
// has and this CPU can execute (of its two widest vector ISAs) each run a
// training step's GEMM shapes on one thread, interleaved, and the fastest
// wins. The result is cached per machine (CPU model and library build), so
// only the first spmd process on a machine pays the ~0.5 s. The choice is
// made when the first CPU backend is created, before any product runs.
//
// SPMD_BLAS_CORE overrides it: a core name ("SkylakeX") runs that core,
// "keep" leaves OpenBLAS's own pick (and so OPENBLAS_CORETYPE) in force,
// "auto" (or unset) measures. describe_blas() says what was chosen and why.
#pragma once

#include <string>
#include <vector>

namespace spmd::cpu {

// One candidate core's rate on the measured shapes.
struct CoreRate {
  std::string core;
  double gflops = 0;  // one thread
};

struct BlasInfo {
  std::string library;          // "OpenBLAS 0.3.21", or "none (Eigen's own GEMM)"
  std::string core;             // the core OpenBLAS runs now: "SkylakeX"; empty without OpenBLAS
  std::string picked;           // the core OpenBLAS picked by itself at load time
  std::string coretype;         // OPENBLAS_CORETYPE as the process found it ("" when unset)
  std::string chosen_by;        // "measured", "cached", "SPMD_BLAS_CORE", "keep" (OpenBLAS's pick,
                                // by SPMD_BLAS_CORE=keep), "OpenBLAS" (its pick: nothing to choose)
  std::vector<CoreRate> rates;  // measured or cached candidates, fastest first
  std::string cache;            // "read from PATH", "cached in PATH" or "not cached: why"
};

// What the products run on; the core is chosen at the first call (the
// CpuBackend constructor makes it). Throws InvalidArgument when
// SPMD_BLAS_CORE names a core this OpenBLAS lacks or this CPU cannot run.
const BlasInfo& blas_info();

// One line for start-up and benchmark headers: "OpenBLAS 0.3.21 core
// SkylakeX (measured fastest at 1 thread: SkylakeX 176, Cooperlake 160,
// Haswell 93, Zen 91 GFLOP/s; cached in ...)".
std::string describe_blas();

// The cores spmd measures on this CPU with this OpenBLAS (empty without a
// DYNAMIC_ARCH OpenBLAS): each built into the library, executable here, and
// of the CPU's two widest vector ISAs. Exposed for the tests.
std::vector<std::string> openblas_core_candidates();

// The vector ISA a core's kernels need (1 SSE3, 2 AVX, 3 AVX2 and FMA, 4
// AVX-512; 0 for a core spmd does not know, never run), and whether this CPU
// executes them. Exposed for the tests.
int openblas_core_isa(const std::string& core);
bool cpu_runs_openblas_core(const std::string& core);

}  // namespace spmd::cpu
