// oneDNN's bf16 GEMM, opened at run time (bf16_gemm.h). The library is
// optional: a build machine needs no oneDNN headers, and a machine without
// libdnnl multiplies bf16 through f32 as before. Its C ABI is stable across
// 2.x and 3.x for this one function.
#include "tensor/cpu/bf16_gemm.h"

#include <dlfcn.h>
#include <strings.h>

#include <cstdlib>

#include "runtime/error.h"
#include "tensor/cpu/capability.h"

namespace spmd::cpu {
namespace {

// dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M,
//     dnnl_dim_t N, dnnl_dim_t K, float alpha, const bfloat16_t *A,
//     dnnl_dim_t lda, const bfloat16_t *B, dnnl_dim_t ldb, float beta,
//     float *C, dnnl_dim_t ldc);  (row-major; dnnl_success is 0)
using GemmBf16 = int (*)(char, char, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                         const uint16_t*, int64_t, float, float*, int64_t);
struct DnnlVersion {
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;
};
using DnnlVersionFn = const DnnlVersion* (*)();

struct Bf16Gemm {
  GemmBf16 fn = nullptr;
  std::string description;
};

Bf16Gemm open_bf16_gemm() {
  const char* env = std::getenv("SPMD_BF16_GEMM");
  const std::string choice = env && *env ? env : "auto";
  SPMD_CHECK(strcasecmp(choice.c_str(), "auto") == 0 || strcasecmp(choice.c_str(), "f32") == 0 ||
                 strcasecmp(choice.c_str(), "onednn") == 0,
             "SPMD_BF16_GEMM=", choice, ": expected auto, onednn or f32");
  const bool required = strcasecmp(choice.c_str(), "onednn") == 0;
  Bf16Gemm g;
  if (strcasecmp(choice.c_str(), "f32") == 0) {
    g.description = "bf16 GEMM through f32 (SPMD_BF16_GEMM=f32)";
    return g;
  }
  // Without AVX512_BF16 a bf16 product is no faster than an f32 one: the
  // operands are widened either way, so the f32 GEMM runs.
  if (!cpu_id().avx512_bf16) {
    SPMD_CHECK(!required, "SPMD_BF16_GEMM=onednn: this CPU has no AVX512_BF16");
    g.description = "bf16 GEMM through f32 (this CPU has no AVX512_BF16)";
    return g;
  }
  void* lib = nullptr;
  for (const char* name : {"libdnnl.so.3", "libdnnl.so.2"})
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
  auto* fn = lib ? reinterpret_cast<GemmBf16>(dlsym(lib, "dnnl_gemm_bf16bf16f32")) : nullptr;
  if (!fn) {
    SPMD_CHECK(!required, "SPMD_BF16_GEMM=onednn: ",
               lib ? "libdnnl lacks dnnl_gemm_bf16bf16f32" : "no libdnnl.so.3 or .so.2 found",
               " (Debian: libdnnl2)");
    g.description = "bf16 GEMM through f32 (no libdnnl; Debian: libdnnl2)";
    return g;
  }
  g.fn = fn;
  auto* version = reinterpret_cast<DnnlVersionFn>(dlsym(lib, "dnnl_version"));
  const DnnlVersion* v = version ? version() : nullptr;
  g.description = "bf16 GEMM oneDNN " +
                  (v ? std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                           std::to_string(v->patch)
                     : std::string("?")) +
                  " (dnnl_gemm_bf16bf16f32, AVX512_BF16)";
  return g;
}

const Bf16Gemm& bf16_gemm() {
  static const Bf16Gemm g = open_bf16_gemm();
  return g;
}

}  // namespace

bool have_bf16_gemm() { return bf16_gemm().fn != nullptr; }

std::string describe_bf16_gemm() { return bf16_gemm().description; }

void gemm_bf16_rows(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb, float beta,
                    float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: oneDNN leaves C as it was, BLAS scales it by beta
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0 ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  const int status = bf16_gemm().fn(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A,
                                    lda, B, ldb, beta, C, ldc);
  SPMD_CHECK(status == 0, "dnnl_gemm_bf16bf16f32 failed with status ", status, " on (", M, ", ", K,
             ") x (", K, ", ", N, ")");
}

}  // namespace spmd::cpu
