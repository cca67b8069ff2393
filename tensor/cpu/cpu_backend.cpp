// The CPU backend's memory (allocator.h), copies that convert
// between any two dtypes, fill and arange. The other methods live in the
// files cpu_backend.h lists; cpu_backend() itself in capability.cpp.
#include "tensor/cpu/cpu_backend.h"

#include <cstring>

#include "tensor/cpu/allocator.h"
#include "tensor/cpu/blas.h"
#include "tensor/cpu/loops.h"

namespace spmd::cpu {
namespace {

// One row of dst[i] = convert(src[i]).
template <class To, class From>
void convert_row(char* const* p, const int64_t* s, int64_t n) {
  if (is_dense<To, From>(s)) {
    To* dst = reinterpret_cast<To*>(p[0]);
    const From* src = reinterpret_cast<const From*>(p[1]);
    for (int64_t i = 0; i < n; ++i) dst[i] = convert_to<To>(src[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    elem<To>(p[0], s[0], i) = convert_to<To>(elem<From>(p[1], s[1], i));
}

// One row of a same-dtype copy: memcpy when both sides are dense.
template <class T>
void copy_row(char* const* p, const int64_t* s, int64_t n) {
  if (is_dense<T, T>(s)) {
    std::memcpy(p[0], p[1], size_t(n) * sizeof(T));
    return;
  }
  for (int64_t i = 0; i < n; ++i) elem<T>(p[0], s[0], i) = elem<T>(p[1], s[1], i);
}

}  // namespace

CpuBackend::CpuBackend() { blas_info(); }

DataPtr CpuBackend::allocate(size_t nbytes, Device device) {
  SPMD_CHECK(device.is_cpu(), "cpu backend: cannot allocate on ", device);
  return allocate_host(nbytes);
}

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  SPMD_CHECK(src.is_cpu() && dst.is_cpu(), "cpu backend: copy from ", src.device(), " to ",
             dst.device());
  SPMD_CHECK(src.shape() == dst.shape(), "copy: shapes differ, ", src.shape(), " and ",
             dst.shape());
  const StridedLoop<2> loop = make_loop<2>({&dst, &src});
  if (src.dtype() == dst.dtype()) {
    // Same dtype: only the element size matters (bf16 and f16 both move 2 bytes).
    return visit_bytes(src.dtype(), [&]<class U>() { for_each_row(loop, kGrain, copy_row<U>); });
  }
  visit_dtype(dst.dtype(), [&]<class To>() {
    visit_dtype(src.dtype(),
                [&]<class From>() { for_each_row(loop, kGrain, convert_row<To, From>); });
  });
}

void CpuBackend::fill(const Tensor& out, double value) {
  const StridedLoop<1> loop = make_loop<1>({&out});
  visit_dtype(out.dtype(), [&]<class T>() {
    for_each_row(loop, kGrain,
                 [fill = convert_to<T>(value)](char* const* p, const int64_t* s, int64_t n) {
                   const T v = fill;  // a local: the closure's copy could alias the stores below
                   if (s[0] == int64_t(sizeof(T))) {
                     T* o = reinterpret_cast<T*>(p[0]);
                     for (int64_t i = 0; i < n; ++i) o[i] = v;
                   } else {
                     for (int64_t i = 0; i < n; ++i) elem<T>(p[0], s[0], i) = v;
                   }
                 });
  });
}

void CpuBackend::arange(const Tensor& out, double start, double step) {
  SPMD_CHECK(out.is_contiguous(), "arange: the output must be contiguous");
  visit_dtype(out.dtype(), [&]<class T>() {
    T* o = out.data<T>();
    parallel_for(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) o[i] = convert_to<T>(start + double(i) * step);
    });
  });
}

}  // namespace spmd::cpu
