// Reduction loops. One template per storage kind: types the CPU computes in
// directly (f32, f64, i32, i64), and the 16-bit floats, widened to f32 per
// element. The combining function is a small functor, so each (op, dtype)
// pair becomes one tight loop the compiler can vectorize.
#include "parallel/comm/tcp/reduce.h"

#include <bit>
#include <cstdint>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "runtime/error.h"

namespace spmd::dist::tcp {
namespace {

// --- The combining functions -------------------------------------------------
// Integers add and multiply as unsigned, so overflow wraps instead of being UB.
template <class T, bool = std::is_integral_v<T>>
struct WrapOf {
  using type = T;
};
template <class T>
struct WrapOf<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <class T>
using Wrap = typename WrapOf<T>::type;

struct Sum {
  template <class T>
  T operator()(T x, T y) const {
    return T(Wrap<T>(x) + Wrap<T>(y));
  }
};
struct Prod {
  template <class T>
  T operator()(T x, T y) const {
    return T(Wrap<T>(x) * Wrap<T>(y));
  }
};
struct Min {
  template <class T>
  T operator()(T x, T y) const {
    return y < x ? y : x;
  }
};
struct Max {
  template <class T>
  T operator()(T x, T y) const {
    return x < y ? y : x;
  }
};
// (x + y) / d, the last step of an average.
struct SumDiv {
  float fd;
  double dd;
  float operator()(float x, float y) const { return (x + y) / fd; }
  double operator()(double x, double y) const { return (x + y) / dd; }
};
struct Div {
  float fd;
  double dd;
  float operator()(float x, float) const { return x / fd; }
  double operator()(double x, double) const { return x / dd; }
};

// --- bf16: the top half of an f32 --------------------------------------------
inline float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }
inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // to nearest, ties to even
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// --- The loops -----------------------------------------------------------------
template <class T, class F>
void native_loop(F f, T* dst, const T* a, const T* b, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f(a[i], b[i]);
}

template <class F>
void bf16_loop(F f, uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(f(bf16_to_f32(a[i]), bf16_to_f32(b[i])));
}

template <class F>
void f16_scalar_loop(F f, uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    dst[i] = Half(f(float(Half::from_bits(a[i])), float(Half::from_bits(b[i])))).bits;
  }
}

#if defined(__x86_64__)
// Eight f16 at a time through F16C; the tail goes through the scalar loop.
template <class F>
__attribute__((target("avx,f16c"))) void f16c_loop(F f, uint16_t* dst, const uint16_t* a,
                                                   const uint16_t* b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    alignas(32) float xs[8], ys[8], zs[8];
    _mm256_store_ps(xs, x);
    _mm256_store_ps(ys, y);
    for (int k = 0; k < 8; ++k) zs[k] = f(xs[k], ys[k]);
    __m128i z = _mm256_cvtps_ph(_mm256_load_ps(zs), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), z);
  }
  f16_scalar_loop(f, dst + i, a + i, b + i, n - i);
}
#endif

template <class F>
void f16_loop(F f, uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n) {
#if defined(__x86_64__)
  static const bool has_f16c = __builtin_cpu_supports("f16c");
  if (has_f16c) return f16c_loop(f, dst, a, b, n);
#endif
  f16_scalar_loop(f, dst, a, b, n);
}

// Runs f over count elements of any communication dtype.
template <class F>
void run(F f, DType dtype, void* dst, const void* a, const void* b, size_t n) {
  auto* d16 = static_cast<uint16_t*>(dst);
  auto* a16 = static_cast<const uint16_t*>(a);
  auto* b16 = static_cast<const uint16_t*>(b);
  switch (dtype) {
    case DType::kF32:
      return native_loop<float>(f, (float*)dst, (const float*)a, (const float*)b, n);
    case DType::kF64:
      return native_loop<double>(f, (double*)dst, (const double*)a, (const double*)b, n);
    case DType::kBF16:
      return bf16_loop(f, d16, a16, b16, n);
    case DType::kF16:
      return f16_loop(f, d16, a16, b16, n);
    default:
      break;
  }
  if constexpr (std::is_invocable_v<F, int32_t, int32_t>) {
    if (dtype == DType::kI32) {
      return native_loop<int32_t>(f, (int32_t*)dst, (const int32_t*)a, (const int32_t*)b, n);
    }
    if (dtype == DType::kI64) {
      return native_loop<int64_t>(f, (int64_t*)dst, (const int64_t*)a, (const int64_t*)b, n);
    }
  }
  SPMD_THROW(InvalidArgument, "reduce: dtype ", dtype_name(dtype), " cannot be reduced here");
}

}  // namespace

void combine(ReduceOp op, DType dtype, void* dst, const void* a, const void* b, size_t count) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return run(Sum{}, dtype, dst, a, b, count);
    case ReduceOp::kProd:
      return run(Prod{}, dtype, dst, a, b, count);
    case ReduceOp::kMin:
      return run(Min{}, dtype, dst, a, b, count);
    case ReduceOp::kMax:
      return run(Max{}, dtype, dst, a, b, count);
  }
}

void combine_and_divide(DType dtype, void* dst, const void* a, const void* b, size_t count,
                        int divisor) {
  run(SumDiv{float(divisor), double(divisor)}, dtype, dst, a, b, count);
}

void divide(DType dtype, void* dst, size_t count, int divisor) {
  run(Div{float(divisor), double(divisor)}, dtype, dst, dst, dst, count);
}

}  // namespace spmd::dist::tcp
