// Opening cuBLAS on first use (kernels/cublas.h): dlopen by its soname (found
// through LD_LIBRARY_PATH, the program's run path and the loader's cache),
// then in the toolkit's library folder the build found, then dlsym of each
// entry point.
#include "kernels/cublas.h"

#include <dlfcn.h>

#include <string>

#include "runtime/error.h"

#define SPMD_STRINGIFY_(x) #x
#define SPMD_STRINGIFY(x) SPMD_STRINGIFY_(x)

namespace spmd::kernels {
namespace {

void* open_library() {
  const std::string soname = "libcublas.so." SPMD_STRINGIFY(CUBLAS_VER_MAJOR);
  std::string tried = soname;
  if (void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
  std::string error = dlerror();
#ifdef SPMD_CUDA_LIBRARY_DIR
  const std::string path = std::string(SPMD_CUDA_LIBRARY_DIR) + "/" + soname;
  if (void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
  tried += ", " + path;
  error = dlerror();
#endif
  SPMD_THROW(Error, "cannot open cuBLAS (tried ", tried, "): ", error,
             "; add the CUDA toolkit's library folder to LD_LIBRARY_PATH");
}

template <class Fn>
void bind(void* lib, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  SPMD_CHECK(*fn != nullptr, "cuBLAS has no entry point ", name, ": ", dlerror());
}

CublasApi load() {
  void* lib = open_library();  // never closed: handles live until the process ends
  CublasApi api{};
  bind(lib, "cublasCreate_v2", &api.create);
  bind(lib, "cublasSetStream_v2", &api.set_stream);
  bind(lib, "cublasSetWorkspace_v2", &api.set_workspace);
  bind(lib, "cublasGemmStridedBatchedEx", &api.gemm_strided_batched_ex);
  bind(lib, "cublasGemmEx", &api.gemm_ex);
  bind(lib, "cublasGetStatusName", &api.status_name);
  bind(lib, "cublasGetStatusString", &api.status_string);
  return api;
}

}  // namespace

const CublasApi& cublas() {
  static const CublasApi api = load();  // a failed load throws and is retried next call
  return api;
}

}  // namespace spmd::kernels
