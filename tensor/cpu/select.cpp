// Selecting between values on the CPU: where, masked_fill, and the triangles
// (tril/triu). Where and the triangles only move elements, so they run on
// the element size alone, whatever the dtype.
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/loops.h"

namespace spmd::cpu {

void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  const StridedLoop<4> loop = make_loop<4>({&out, &cond, &a, &b});
  visit_bytes(out.dtype(), [&]<class U>() {
    for_each_row(loop, kGrain, [](char* const* p, const int64_t* s, int64_t n) {
      if (is_dense<U, bool, U, U>(s)) {  // a select the compiler vectorizes
        U* o = reinterpret_cast<U*>(p[0]);
        const uint8_t* c = reinterpret_cast<const uint8_t*>(p[1]);  // bytes vectorize, bools not
        const U* x = reinterpret_cast<const U*>(p[2]);
        const U* y = reinterpret_cast<const U*>(p[3]);
        for (int64_t i = 0; i < n; ++i) {
          const U xi = x[i], yi = y[i];  // both loaded: the select needs no branch
          o[i] = c[i] ? xi : yi;
        }
        return;
      }
      for (int64_t i = 0; i < n; ++i)
        elem<U>(p[0], s[0], i) =
            elem<bool>(p[1], s[1], i) ? elem<U>(p[2], s[2], i) : elem<U>(p[3], s[3], i);
    });
  });
}

void CpuBackend::masked_fill(const Tensor& x, const Tensor& mask, double value, const Tensor& out) {
  const StridedLoop<3> loop = make_loop<3>({&out, &x, &mask});
  visit_dtype(out.dtype(), [&]<class T>() {
    for_each_row(
        loop, kGrain, [fill = convert_to<T>(value)](char* const* p, const int64_t* s, int64_t n) {
          const T v = fill;  // a local: the closure's copy could alias the stores below
          if (is_dense<T, T, bool>(s)) {
            T* o = reinterpret_cast<T*>(p[0]);
            const T* in = reinterpret_cast<const T*>(p[1]);
            const uint8_t* m =
                reinterpret_cast<const uint8_t*>(p[2]);  // bytes vectorize, bools not
            for (int64_t i = 0; i < n; ++i) {
              const T xi = in[i];  // loaded whatever the mask: the select needs no branch
              o[i] = m[i] ? v : xi;
            }
            return;
          }
          for (int64_t i = 0; i < n; ++i)
            elem<T>(p[0], s[0], i) = elem<bool>(p[2], s[2], i) ? v : elem<T>(p[1], s[1], i);
        });
  });
}

void CpuBackend::triangle(const Tensor& x, int64_t diagonal, bool upper, const Tensor& out) {
  SPMD_CHECK(x.ndim() >= 2, upper ? "triu" : "tril", ": expected at least 2 dims, got ", x.shape());
  const int nd = x.ndim();
  const int64_t M = x.size(-2), N = x.size(-1);
  const int64_t xs = x.stride(-1), os = out.stride(-1);
  char* xbase = static_cast<char*>(x.raw_data());
  char* obase = static_cast<char*>(out.raw_data());
  visit_bytes(out.dtype(), [&]<class U>() {
    const int64_t rows = x.numel() / std::max<int64_t>(N, 1);
    parallel_for(rows, std::max<int64_t>(kGrain / std::max<int64_t>(N, 1), 1),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t r = begin; r < end; ++r) {
                     const int64_t i = r % M;  // the row within its matrix
                     const U* xr = reinterpret_cast<const U*>(xbase + byte_offset(x, nd - 1, r));
                     U* orow = reinterpret_cast<U*>(obase + byte_offset(out, nd - 1, r));
                     for (int64_t j = 0; j < N; ++j) {
                       const bool keep = upper ? j - i >= diagonal : j - i <= diagonal;
                       orow[j * os] =
                           keep ? xr[j * xs] : U(0);  // all-zero bits are 0 in every dtype
                     }
                   }
                 });
  });
}

}  // namespace spmd::cpu
