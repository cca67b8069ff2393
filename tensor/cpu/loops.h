// How the CPU backend walks tensors: the shared helpers of tensor/cpu/.
//
// An elementwise op over N operands of one shape (operand 0 the output) is a
// StridedLoop: the operands' base pointers and byte strides with every dim
// that can be merged merged away, so that a contiguous tensor of any shape is
// one long row and a (B, T, C) + (C) bias add is B*T rows of C. The op is a
// row function
//
//   row(char* const* ptrs, const int64_t* strides, int64_t n)
//
// called on pieces of the innermost dim; each row function tests once whether
// its strides are the element sizes (contiguous: a plain loop the compiler
// vectorizes) and otherwise walks the strides. for_each_row splits the
// elements into one range per OpenMP thread when there are enough of them
// (kGrain) to pay for starting the team; below that it runs on the caller.
//
// Not here: reordering dims by stride (a transposed output is walked in its
// own row-major order) and blocked transposes.
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tensor/tensor.h"
#include "tensor/threads.h"

namespace spmd::cpu {

// Below this many elements of a cheap op (an add, a copy), one thread does
// the work: waking an OpenMP team costs microseconds, as much as ~32K adds.
// Expensive ops (exp, tanh, a row of softmax) pass a smaller grain.
constexpr int64_t kGrain = 32768;
// The grain of ops that cost tens of cycles per element (exp, tanh, erf).
constexpr int64_t kCostlyGrain = 4096;

// The grain of an op over rows of n elements, from the grain of its
// elements: a row counts as n of them.
inline int64_t row_grain(int64_t n, int64_t element_grain) {
  return std::max<int64_t>(1, element_grain / std::max<int64_t>(n, 1));
}

// The number of threads an op of `n` items, each worth `grain`-th of a
// team's start-up cost, should use: 1 inside another parallel region.
inline int threads_for(int64_t n, int64_t grain) {
  if (n < 2 * grain || omp_in_parallel()) return 1;
  return int(std::min<int64_t>(omp_get_max_threads(), n / grain));
}

// Calls fn(t, begin, end) for t < nthreads on one contiguous range of [0, n)
// per thread (ranges aligned to 16 items, so vector loops start on whole
// cache lines); with nthreads <= 1, fn(0, 0, n) on the calling thread.
// Thread t owns index t of any per-thread scratch sized nthreads. fn must
// not throw.
template <class F>
void run_on_threads(int64_t n, int nthreads, const F& fn) {
  if (n <= 0) return;
  if (nthreads <= 1) {
    fn(0, int64_t(0), n);
    return;
  }
  note_thread_team();
#pragma omp parallel num_threads(nthreads)
  {
    const int64_t nt = omp_get_num_threads();
    const int64_t chunk = ((n + nt - 1) / nt + 15) / 16 * 16;
    const int t = omp_get_thread_num();
    const int64_t begin = t * chunk;
    const int64_t end = std::min(n, begin + chunk);
    if (begin < end) fn(t, begin, end);
  }
}

// Calls fn(begin, end) on one contiguous range of [0, n) per thread, or on
// [0, n) on the calling thread when n < 2 * grain. fn must not throw.
template <class F>
void parallel_for(int64_t n, int64_t grain, const F& fn) {
  run_on_threads(n, threads_for(n, grain),
                 [&](int, int64_t begin, int64_t end) { fn(begin, end); });
}

// N operands of one shape, dims merged; strides in bytes.
template <int N>
struct StridedLoop {
  int ndim = 1;
  int64_t numel = 0;
  int64_t sizes[Shape::kMaxDims] = {1};
  int64_t strides[N][Shape::kMaxDims] = {};
  char* data[N] = {};
};

// The loop over `ops` (all of ops[0]'s shape; undefined entries get stride 0
// and a null pointer). Size-1 dims are dropped and neighbouring dims merged
// when every operand steps through them as through one dim.
template <int N>
StridedLoop<N> make_loop(const std::array<const Tensor*, N>& ops) {
  StridedLoop<N> loop;
  const Shape& shape = ops[0]->shape();
  loop.numel = shape.numel();
  for (int k = 0; k < N; ++k)
    if (ops[k]->defined()) loop.data[k] = static_cast<char*>(ops[k]->raw_data());
  int nd = 0;  // merged dims so far, innermost first
  for (int d = shape.ndim() - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; k < N && merge; ++k) {
      const int64_t s = ops[k]->defined() ? ops[k]->strides()[d] : 0;
      merge = s * int64_t(element_size(ops[k]->dtype())) ==
              loop.strides[k][nd - 1] * loop.sizes[nd - 1];
    }
    if (merge) {
      loop.sizes[nd - 1] *= shape[d];
      continue;
    }
    loop.sizes[nd] = shape[d];
    for (int k = 0; k < N; ++k) {
      const int64_t s = ops[k]->defined() ? ops[k]->strides()[d] : 0;
      loop.strides[k][nd] = ops[k]->defined() ? s * int64_t(element_size(ops[k]->dtype())) : 0;
    }
    ++nd;
  }
  if (nd == 0) {  // a single element (or a 0-d tensor)
    loop.sizes[0] = 1;
    for (int k = 0; k < N; ++k) loop.strides[k][0] = 0;
    nd = 1;
  }
  // Stored innermost first above; flip to the usual outermost-first order.
  loop.ndim = nd;
  std::reverse(loop.sizes, loop.sizes + nd);
  for (int k = 0; k < N; ++k) std::reverse(loop.strides[k], loop.strides[k] + nd);
  return loop;
}

// Runs row() over elements [begin, end) of the loop, in row-major order.
template <int N, class Row>
void run_range(const StridedLoop<N>& loop, int64_t begin, int64_t end, const Row& row) {
  const int inner_dim = loop.ndim - 1;
  const int64_t inner = loop.sizes[inner_dim];
  int64_t idx[Shape::kMaxDims] = {};
  int64_t rest = begin / inner;
  int64_t pos = begin % inner;
  for (int d = inner_dim - 1; d >= 0; --d) {
    idx[d] = rest % loop.sizes[d];
    rest /= loop.sizes[d];
  }
  int64_t inner_strides[N];
  for (int k = 0; k < N; ++k) inner_strides[k] = loop.strides[k][inner_dim];
  char* ptrs[N];
  for (int64_t done = begin; done < end;) {
    for (int k = 0; k < N; ++k) {
      int64_t off = pos * inner_strides[k];
      for (int d = 0; d < inner_dim; ++d) off += idx[d] * loop.strides[k][d];
      ptrs[k] = loop.data[k] + off;
    }
    const int64_t n = std::min(inner - pos, end - done);
    row(ptrs, inner_strides, n);
    done += n;
    pos = 0;
    for (int d = inner_dim - 1; d >= 0; --d) {  // next row: carry through the outer dims
      if (++idx[d] < loop.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

// Runs row() over every element, split across threads when there are more
// than 2 * grain of them.
template <int N, class Row>
void for_each_row(const StridedLoop<N>& loop, int64_t grain, const Row& row) {
  if (loop.numel == 0) return;
  parallel_for(loop.numel, grain,
               [&](int64_t begin, int64_t end) { run_range(loop, begin, end, row); });
}

// The byte offset, from t's first element, of the element whose row-major
// index over t's first `ndim` dims is `i` (a whole sub-tensor when ndim <
// t.ndim()).
inline int64_t byte_offset(const Tensor& t, int ndim, int64_t i) {
  int64_t off = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    const int64_t size = t.shape()[d];
    off += (i % size) * t.strides()[d];
    i /= size;
  }
  return off * int64_t(element_size(t.dtype()));
}

// An unsigned integer type of N bytes: copies move elements by size alone.
template <size_t N>
using bytes_t = std::conditional_t<
    N == 1, uint8_t,
    std::conditional_t<N == 2, uint16_t, std::conditional_t<N == 4, uint32_t, uint64_t>>>;

// Calls f.template operator()<U>() with U the bytes_t of dt's element size.
template <class F>
decltype(auto) visit_bytes(DType dt, F&& f) {
  switch (element_size(dt)) {
    case 1:
      return f.template operator()<uint8_t>();
    case 2:
      return f.template operator()<uint16_t>();
    case 4:
      return f.template operator()<uint32_t>();
    default:
      return f.template operator()<uint64_t>();
  }
}

// As visit_dtype for the four floating dtypes; others throw naming `op`.
template <class F>
decltype(auto) visit_floating(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::kF32:
      return f.template operator()<float>();
    case DType::kF64:
      return f.template operator()<double>();
    case DType::kBF16:
      return f.template operator()<BFloat16>();
    case DType::kF16:
      return f.template operator()<Half>();
    default:
      SPMD_THROW(InvalidArgument, op, ": expected a floating-point tensor, got ", dtype_name(dt));
  }
}

// --- Element access ----------------------------------------------------------

// The type the CPU computes a dtype in: f32 for the half types, else itself.
template <class T>
using compute_t =
    std::conditional_t<std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>, float, T>;

// v converted to To as a C++ cast would, through f32 for the half types;
// anything to bool is `v != 0`.
template <class To, class From>
inline To convert_to(From v) {
  using C = compute_t<From>;
  const C c = static_cast<C>(v);
  if constexpr (std::is_same_v<To, bool>) {
    return c != C(0);
  } else if constexpr (std::is_same_v<To, BFloat16> || std::is_same_v<To, Half>) {
    return To(static_cast<float>(c));
  } else {
    return static_cast<To>(c);
  }
}

// A dense row of n elements of T seen as its compute type: the row itself
// when T already is that type, else converted into buf.
template <class T, class C = compute_t<T>>
const C* row_in(const T* p, int64_t n, std::vector<C>& buf) {
  if constexpr (std::is_same_v<T, C>) {
    return p;
  } else {
    buf.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) buf[i] = C(p[i]);
    return buf.data();
  }
}
// Where to compute a row bound for p: p itself, or buf (then row_out copies it over).
template <class T, class C = compute_t<T>>
C* row_buf(T* p, int64_t n, std::vector<C>& buf) {
  if constexpr (std::is_same_v<T, C>) {
    return p;
  } else {
    buf.resize(size_t(n));
    return buf.data();
  }
}
template <class T, class C = compute_t<T>>
void row_out(T* p, int64_t n, const C* computed) {
  if constexpr (!std::is_same_v<T, C>) {
    for (int64_t i = 0; i < n; ++i) p[i] = T(computed[i]);
  }
}

template <class T>
inline T& elem(char* p, int64_t stride, int64_t i) {
  return *reinterpret_cast<T*>(p + i * stride);
}

// True when every operand of a row steps by exactly its element size.
template <class... Ts>
inline bool is_dense(const int64_t* strides) {
  constexpr int64_t sizes[] = {int64_t(sizeof(Ts))...};
  for (size_t k = 0; k < sizeof...(Ts); ++k)
    if (strides[k] != sizes[k]) return false;
  return true;
}

}  // namespace spmd::cpu
