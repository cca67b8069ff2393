// Device-side building blocks shared by the .cu files of kernels/: reading and
// writing any element type through a compute type, strided offsets, and warp
// and block reductions. Included by .cu files only.
//
// Compute types: bf16 and f16 are computed in f32 and rounded back (round to
// nearest even), as on the CPU; f64 in f64; integers and bool in int64.
// Conversions from f64 to a 16-bit type go through f32, as the CPU's do.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda_check.h"
#include "kernels/types.h"

namespace spmd::kernels {

using bf16 = __nv_bfloat16;
using f16 = __half;

// --- Conversions --------------------------------------------------------------

template <class To, class From>
__device__ __forceinline__ To convert(From x) {
  if constexpr (std::is_same_v<From, bf16> || std::is_same_v<From, f16>) {
    return convert<To>(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, bf16>) {
    return __float2bfloat16_rn(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, f16>) {
    return __float2half_rn(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, bool>) {
    return x != From(0);
  } else {
    return static_cast<To>(x);
  }
}

// The type a storage type T is computed in.
template <class T>
struct ComputeOf {
  using type = int64_t;
};
template <>
struct ComputeOf<float> {
  using type = float;
};
template <>
struct ComputeOf<bf16> {
  using type = float;
};
template <>
struct ComputeOf<f16> {
  using type = float;
};
template <>
struct ComputeOf<double> {
  using type = double;
};
template <class T>
using compute_t = typename ComputeOf<T>::type;

// Element i of a buffer of runtime type dt, converted to C. The switch is on a
// value every thread of the launch shares, so it costs no divergence.
template <class C>
__device__ __forceinline__ C load_as(const void* p, ScalarType dt, int64_t i) {
  switch (dt) {
    case ScalarType::kF32:
      return convert<C>(static_cast<const float*>(p)[i]);
    case ScalarType::kF64:
      return convert<C>(static_cast<const double*>(p)[i]);
    case ScalarType::kBF16:
      return convert<C>(static_cast<const bf16*>(p)[i]);
    case ScalarType::kF16:
      return convert<C>(static_cast<const f16*>(p)[i]);
    case ScalarType::kI32:
      return convert<C>(static_cast<const int32_t*>(p)[i]);
    case ScalarType::kI64:
      return convert<C>(static_cast<const int64_t*>(p)[i]);
    case ScalarType::kU8:
      return convert<C>(static_cast<const uint8_t*>(p)[i]);
    case ScalarType::kBool:
      return convert<C>(static_cast<const uint8_t*>(p)[i] != 0);
  }
  return C(0);
}

template <class C>
__device__ __forceinline__ void store_as(void* p, ScalarType dt, int64_t i, C v) {
  switch (dt) {
    case ScalarType::kF32:
      static_cast<float*>(p)[i] = convert<float>(v);
      break;
    case ScalarType::kF64:
      static_cast<double*>(p)[i] = convert<double>(v);
      break;
    case ScalarType::kBF16:
      static_cast<bf16*>(p)[i] = convert<bf16>(v);
      break;
    case ScalarType::kF16:
      static_cast<f16*>(p)[i] = convert<f16>(v);
      break;
    case ScalarType::kI32:
      static_cast<int32_t*>(p)[i] = convert<int32_t>(v);
      break;
    case ScalarType::kI64:
      static_cast<int64_t*>(p)[i] = convert<int64_t>(v);
      break;
    case ScalarType::kU8:
      static_cast<uint8_t*>(p)[i] = convert<uint8_t>(v);
      break;
    case ScalarType::kBool:
      static_cast<uint8_t*>(p)[i] = v != C(0) ? 1 : 0;
      break;
  }
}

// --- Strided offsets ------------------------------------------------------------

// Sizes and per-operand strides of up to N operands sharing one shape.
template <int N>
struct Offsets {
  int ndim;
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];

  // The element offset of linear (row-major) index `linear` in every operand.
  template <class I>
  __device__ __forceinline__ void compute(I linear, int64_t (&out)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const I size = static_cast<I>(sizes[d]);
      const I coord = linear % size;
      linear /= size;
#pragma unroll
      for (int k = 0; k < N; ++k) out[k] += static_cast<int64_t>(coord) * strides[k][d];
    }
  }
};

// The shape and strides of N operands (all of ops[0]'s shape; null ones get
// stride 0) with size-1 dims dropped and neighbouring dims merged wherever every
// operand lays them out one inside the other, so most launches see 1 to 3 dims.
template <int N>
inline Offsets<N> collapse_dims(const TensorArg* const (&ops)[N]) {
  Offsets<N> r{};
  r.ndim = 0;
  const TensorArg& shape = *ops[0];
  for (int d = shape.ndim - 1; d >= 0; --d) {  // innermost first
    const int64_t size = shape.sizes[d];
    if (size == 1) continue;
    bool merge = r.ndim > 0;
    for (int k = 0; k < N && merge; ++k) {
      const int64_t inner = ops[k] ? ops[k]->strides[d] : 0;
      const int64_t expected = r.strides[k][r.ndim - 1] * r.sizes[r.ndim - 1];
      merge = inner == expected;
    }
    if (merge) {
      r.sizes[r.ndim - 1] *= size;
      continue;
    }
    r.sizes[r.ndim] = size;
    for (int k = 0; k < N; ++k) r.strides[k][r.ndim] = ops[k] ? ops[k]->strides[d] : 0;
    ++r.ndim;
  }
  if (r.ndim == 0) {
    r.ndim = 1;
    r.sizes[0] = 1;
  }
  // Built innermost first; the kernels want row-major order.
  for (int i = 0, j = r.ndim - 1; i < j; ++i, --j) {
    const int64_t s = r.sizes[i];
    r.sizes[i] = r.sizes[j];
    r.sizes[j] = s;
    for (int k = 0; k < N; ++k) {
      const int64_t t = r.strides[k][i];
      r.strides[k][i] = r.strides[k][j];
      r.strides[k][j] = t;
    }
  }
  return r;
}

// --- Reductions across threads -------------------------------------------------

template <class A, class F>
__device__ __forceinline__ A warp_reduce(A v, F combine) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = combine(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// The combinations block_reduce takes, each with its identity (the value
// that changes nothing: what a lane without a warp's partial contributes).
struct Sum {
  template <class A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return a + b;
  }
  template <class A>
  __device__ __forceinline__ static A identity() {
    return A(0);
  }
};
struct Max {
  template <class A>
  __device__ __forceinline__ A operator()(A a, A b) const {
    return a > b ? a : b;
  }
  template <class A>
  __device__ __forceinline__ static A identity() {
    return A(-INFINITY);
  }
};

// Reduces v over the threads of a 1-D block (blockDim.x a multiple of 32, at
// most 1024); every thread gets the result. `shared` holds 32 values. Two
// stages: each warp reduces its 32 values, then one warp's lanes reduce the
// warps' partials; lanes past the number of warps hold the identity (a
// repeated partial would be counted again by a sum).
template <class A, class F>
__device__ __forceinline__ A block_reduce(A v, F combine, A* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  v = warp_reduce(v, combine);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : F::template identity<A>();
  return warp_reduce(v, combine);
}

// Calls f(Tag<T>{}) with T the storage type of a floating dtype; throws
// naming `op` for any other.
template <class T>
struct Tag {
  using type = T;
};
template <class F>
void dispatch_floating(ScalarType dt, const char* op, F&& f) {
  switch (dt) {
    case ScalarType::kF32:
      return f(Tag<float>{});
    case ScalarType::kF64:
      return f(Tag<double>{});
    case ScalarType::kBF16:
      return f(Tag<bf16>{});
    case ScalarType::kF16:
      return f(Tag<f16>{});
    default:
      SPMD_THROW(InvalidArgument, op, ": expected a floating-point tensor, got ", scalar_name(dt));
  }
}

// Threads for a block that owns one row of `cols` elements: about one thread
// per four elements, a multiple of 32, at most 1024.
inline int threads_for_row(int64_t cols) {
  int t = 32;
  while (t < 1024 && int64_t(t) * 4 < cols) t *= 2;
  return t;
}

// Launch sizes: enough blocks of `threads` to cover n items, capped at a few
// waves of the machine (grid-stride loops cover the rest).
inline unsigned grid_for(int64_t n, int threads, int waves = 8) {
  const int64_t blocks = (n + threads - 1) / threads;
  const int64_t cap = int64_t(multiprocessor_count()) * waves * (2048 / threads);
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks < cap ? blocks : cap));
}

}  // namespace spmd::kernels
