// This capability's CPU backend, and the one symbol its kernel objects export
// (kernels.h): spmd_cpu_backend_<cap>, which capability.cpp calls.
#include "tensor/cpu/kernels.h"

#define SPMD_CPU_CAT_(a, b) a##b
#define SPMD_CPU_CAT(a, b) SPMD_CPU_CAT_(a, b)

extern "C" spmd::Backend* SPMD_CPU_CAT(spmd_cpu_backend_, SPMD_CPU_CAP)() {
  static spmd::cpu::SPMD_CPU_CAP::KernelBackend backend;
  return &backend;
}
