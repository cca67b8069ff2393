// The three GEMMs behind one signature. Each is looked up once; a library
// that is not installed (or lacks the symbol) is reported, not fatal.
#include "bench/gemm_libraries.h"

#include <dlfcn.h>
#include <omp.h>

#if SPMD_HAVE_OPENBLAS
#include <cblas.h>  // OpenBLAS's: also openblas_set_num_threads, openblas_get_config
#endif

namespace spmd::bench {
namespace {

// BLIS's typed API (blis.h, 64-bit dim_t and inc_t on x86-64): strides are
// given per row (rs) and per column (cs), and trans_t's transpose bit is 0x8.
using BliSgemm = void (*)(int transa, int transb, int64_t m, int64_t n, int64_t k,
                          const float* alpha, const float* a, int64_t rsa, int64_t csa,
                          const float* b, int64_t rsb, int64_t csb, const float* beta, float* c,
                          int64_t rsc, int64_t csc);
using BliSetThreads = void (*)(int64_t);
using BliVersion = const char* (*)();
constexpr int kBliTranspose = 0x8;

// oneDNN's dnnl_sgemm: row-major, BLAS's character flags.
using DnnlSgemm = int (*)(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha,
                          const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                          float* C, int64_t ldc);
struct DnnlVersion {
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;
};
using DnnlVersionFn = const DnnlVersion* (*)();

BliSgemm g_bli_sgemm = nullptr;
BliSetThreads g_bli_set_threads = nullptr;
DnnlSgemm g_dnnl_sgemm = nullptr;

void* open_first(std::initializer_list<const char*> names, int flags) {
  for (const char* n : names)
    if (void* h = dlopen(n, flags)) return h;
  return nullptr;
}

GemmLibrary openblas() {
  GemmLibrary lib;
  lib.name = "openblas";
#if SPMD_HAVE_OPENBLAS
  lib.available = true;
  lib.version = openblas_get_config();
  lib.sgemm = [](bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float* C, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                int(M), int(N), int(K), 1.0f, A, int(lda), B, int(ldb), 0.0f, C, int(ldc));
  };
  lib.set_threads = [](int n) { openblas_set_num_threads(n); };
#else
  lib.version = "not linked (spmd built without OpenBLAS)";
#endif
  return lib;
}

GemmLibrary blis() {
  GemmLibrary lib;
  lib.name = "blis";
  void* h = open_first({"libblis.so.4", "libblis.so"}, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!h) {
    lib.version = "not installed (Debian: libblis4-openmp)";
    return lib;
  }
  g_bli_sgemm = reinterpret_cast<BliSgemm>(dlsym(h, "bli_sgemm"));
  g_bli_set_threads = reinterpret_cast<BliSetThreads>(dlsym(h, "bli_thread_set_num_threads"));
  auto version = reinterpret_cast<BliVersion>(dlsym(h, "bli_info_get_version_str"));
  if (!g_bli_sgemm || !g_bli_set_threads) {
    lib.version = "libblis without bli_sgemm";
    return lib;
  }
  lib.available = true;
  lib.version = std::string("BLIS ") + (version ? version() : "?");
  lib.sgemm = [](bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float* C, int64_t ldc) {
    const float one = 1.0f, zero = 0.0f;
    // Strides of the matrices as stored: row-major, so (row stride ld, column stride 1).
    g_bli_sgemm(ta ? kBliTranspose : 0, tb ? kBliTranspose : 0, M, N, K, &one, A, lda, 1, B, ldb, 1,
                &zero, C, ldc, 1);
  };
  lib.set_threads = [](int n) { g_bli_set_threads(n); };
  return lib;
}

GemmLibrary onednn() {
  GemmLibrary lib;
  lib.name = "onednn";
  void* h = open_first({"libdnnl.so.3", "libdnnl.so.2", "libdnnl.so"}, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    lib.version = "not installed (Debian: libdnnl2)";
    return lib;
  }
  g_dnnl_sgemm = reinterpret_cast<DnnlSgemm>(dlsym(h, "dnnl_sgemm"));
  auto version = reinterpret_cast<DnnlVersionFn>(dlsym(h, "dnnl_version"));
  if (!g_dnnl_sgemm) {
    lib.version = "libdnnl without dnnl_sgemm";
    return lib;
  }
  lib.available = true;
  if (version) {
    const DnnlVersion* v = version();
    lib.version = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                  std::to_string(v->patch);
  }
  lib.sgemm = [](bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float* C, int64_t ldc) {
    g_dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
  };
  // Debian's oneDNN runs on the OpenMP runtime spmd shares (libgomp).
  lib.set_threads = [](int n) { omp_set_num_threads(n); };
  return lib;
}

}  // namespace

const std::vector<GemmLibrary>& gemm_libraries() {
  static const std::vector<GemmLibrary> libs = {openblas(), blis(), onednn()};
  return libs;
}

}  // namespace spmd::bench
