// Indexing on the CPU: index_select and its backward index_add, gather and
// its backward scatter_add.
//
// Each is a loop over a "slice": the elements that share one index. For
// index_select that is x (and out) with `dim` removed, walked once per index
// j with the base pointers moved to x[.., index[j], ..] and out[.., j, ..].
// For gather and scatter_add it is the index tensor's shape, with the
// indexed tensor seen through a view whose stride along `dim` is 0; the row
// adds index * stride itself. Index values are checked before anything is
// written, on the calling thread, so a bad index throws instead of writing
// out of bounds.
#include <cstring>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/loops.h"

namespace spmd::cpu {
namespace {

// Throws unless every value of `index` lies in [0, size).
void check_index(const Tensor& index, int64_t size, const char* op) {
  SPMD_CHECK(index.dtype() == DType::kI64, op, ": expected an i64 index, got ",
             dtype_name(index.dtype()));
  const StridedLoop<1> loop = make_loop<1>({&index});
  int64_t bad = 0;
  bool ok = true;
  if (loop.numel > 0) {
    run_range(loop, 0, loop.numel, [&](char* const* p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n && ok; ++i) {
        const int64_t v = elem<int64_t>(p[0], s[0], i);
        if (v < 0 || v >= size) ok = false, bad = v;
      }
    });
  }
  SPMD_CHECK(ok, op, ": index ", bad, " is out of range for a dim of size ", size);
}

// t without `dim` (a view of the same storage).
Tensor drop_dim(const Tensor& t, int dim) {
  Shape shape = t.shape(), strides = t.strides();
  shape.erase(dim);
  strides.erase(dim);
  return Tensor(t.storage(), shape, strides, t.offset(), t.dtype());
}

// t seen with `shape` and a 0 stride along `dim`: the base of a gather/scatter.
Tensor zero_dim_view(const Tensor& t, const Shape& shape, int dim) {
  Shape strides = t.strides();
  strides[dim] = 0;
  return Tensor(t.storage(), shape, strides, t.offset(), t.dtype());
}

// The slice loop moved to out index j and source index i along dim.
template <int N>
StridedLoop<N> moved(StridedLoop<N> loop, int64_t out_step, int64_t src_step) {
  loop.data[0] += out_step;
  loop.data[1] += src_step;
  return loop;
}

template <class U>
void copy_row(char* const* p, const int64_t* s, int64_t n) {
  if (is_dense<U, U>(s)) {
    std::memcpy(p[0], p[1], size_t(n) * sizeof(U));
    return;
  }
  for (int64_t i = 0; i < n; ++i) elem<U>(p[0], s[0], i) = elem<U>(p[1], s[1], i);
}

template <class T>
void add_row(char* const* p, const int64_t* s, int64_t n) {
  using C = compute_t<T>;
  for (int64_t i = 0; i < n; ++i) {
    T& o = elem<T>(p[0], s[0], i);
    o = T(C(o) + C(elem<T>(p[1], s[1], i)));
  }
}

}  // namespace

void CpuBackend::index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) {
  check_index(index, x.size(dim), "index_select");
  const Tensor xs = drop_dim(x, dim), os = drop_dim(out, dim);
  const StridedLoop<2> loop = make_loop<2>({&os, &xs});
  const int64_t esize = int64_t(element_size(x.dtype()));
  const int64_t out_step = out.stride(dim) * esize, x_step = x.stride(dim) * esize;
  const int64_t L = index.numel(), idx_stride = index.ndim() ? index.stride(0) : 0;
  const int64_t* idx = index.data<int64_t>();
  if (loop.numel == 0) return;
  visit_bytes(x.dtype(), [&]<class U>() {
    parallel_for(L, std::max<int64_t>(1, kGrain / loop.numel), [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        if (loop.ndim == 1) {  // one row per index (an embedding lookup): copy it directly
          char* ptrs[2] = {loop.data[0] + j * out_step,
                           loop.data[1] + idx[j * idx_stride] * x_step};
          const int64_t strides[2] = {loop.strides[0][0], loop.strides[1][0]};
          copy_row<U>(ptrs, strides, loop.numel);
        } else {
          run_range(moved(loop, j * out_step, idx[j * idx_stride] * x_step), 0, loop.numel,
                    copy_row<U>);
        }
      }
    });
  });
}

void CpuBackend::index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  check_index(index, out.size(dim), "index_add");
  const Tensor os = drop_dim(out, dim), ss = drop_dim(src, dim);
  const StridedLoop<2> loop = make_loop<2>({&os, &ss});
  const int64_t esize = int64_t(element_size(out.dtype()));
  const int64_t out_step = out.stride(dim) * esize, src_step = src.stride(dim) * esize;
  const int64_t L = index.numel(), idx_stride = index.ndim() ? index.stride(0) : 0;
  const int64_t* idx = index.data<int64_t>();
  visit_dtype(out.dtype(), [&]<class T>() {
    // Threads own disjoint parts of the slice and each walks every index, so
    // repeated indices accumulate without races.
    parallel_for(loop.numel, std::max<int64_t>(1, kGrain / std::max<int64_t>(L, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t j = 0; j < L; ++j)
                     run_range(moved(loop, idx[j * idx_stride] * out_step, j * src_step), begin,
                               end, add_row<T>);
                 });
  });
}

void CpuBackend::gather(const Tensor& x, int dim, const Tensor& index, const Tensor& out) {
  check_index(index, x.size(dim), "gather");
  const Tensor xv = zero_dim_view(x, index.shape(), dim);
  const StridedLoop<3> loop = make_loop<3>({&out, &index, &xv});
  const int64_t x_step = x.stride(dim) * int64_t(element_size(x.dtype()));
  visit_bytes(x.dtype(), [&]<class U>() {
    for_each_row(loop, kGrain, [x_step](char* const* p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        elem<U>(p[0], s[0], i) =
            *reinterpret_cast<const U*>(p[2] + i * s[2] + elem<int64_t>(p[1], s[1], i) * x_step);
    });
  });
}

void CpuBackend::scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  check_index(index, out.size(dim), "scatter_add");
  const Tensor ov = zero_dim_view(out, index.shape(), dim);
  const Tensor sv(src.storage(), index.shape(), src.strides(), src.offset(), src.dtype());
  const StridedLoop<3> loop = make_loop<3>({&sv, &index, &ov});
  const int64_t out_step = out.stride(dim) * int64_t(element_size(out.dtype()));
  visit_dtype(out.dtype(), [&]<class T>() {
    using C = compute_t<T>;
    if (loop.numel == 0) return;
    // Serial: two indices may name one element of out.
    run_range(loop, 0, loop.numel, [out_step](char* const* p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        T& o = *reinterpret_cast<T*>(p[2] + i * s[2] + elem<int64_t>(p[1], s[1], i) * out_step);
        o = T(C(o) + C(elem<T>(p[0], s[0], i)));
      }
    });
  });
}

}  // namespace spmd::cpu
