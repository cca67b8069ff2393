// The values spmd-bench sends when it checks a collective (-c), and the ones
// each rank must then hold, worked out independently of the communicator.
//
// Rank r contributes input_value(op, r, i) at index i of the buffer it sends:
// a small integer from a hash of (r, i), so that a chunk landing at the wrong
// offset, from the wrong rank or twice is caught (a periodic pattern would
// let shifted chunks match). For sum, min, max and avg the values lie in
// [-8, 7]; for prod in {-2, -1, 1, 2}. Sums of up to 16 ranks and products of
// up to 8 are then exact in every dtype, bf16 included (8 significant bits),
// so results are compared bit for bit; only avg, whose division rounds, is
// allowed one unit in the last place.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "parallel/comm/types.h"
#include "runtime/error.h"
#include "tensor/dtype.h"
#include "tensor/half.h"

namespace spmd::bench {

// splitmix64's finalizer: every input bit moves every output bit.
inline uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline double input_value(dist::ReduceOp op, int rank, size_t i) {
  const uint64_t h = mix(mix(uint64_t(i)) ^ uint64_t(rank + 1));
  if (op == dist::ReduceOp::kProd) {
    constexpr double kFactors[4] = {-2, -1, 1, 2};
    return kFactors[h & 3];
  }
  return double(int(h & 15) - 8);
}

// The combination over ranks 0..p-1 of input_value(op, r, i), in exact
// arithmetic (avg: the sum divided by p, before rounding).
inline double reduced_value(dist::ReduceOp op, int p, size_t i) {
  double acc = input_value(op, 0, i);
  for (int r = 1; r < p; ++r) {
    const double v = input_value(op, r, i);
    switch (op) {
      case dist::ReduceOp::kSum:
      case dist::ReduceOp::kAvg:
        acc += v;
        break;
      case dist::ReduceOp::kProd:
        acc *= v;
        break;
      case dist::ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case dist::ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  return op == dist::ReduceOp::kAvg ? acc / p : acc;
}

// Whether `got` is the expected value: equal once the expected value is
// rounded to T, or (avg only) within one unit in the last place of T.
template <class T>
bool matches(T got, double expected, bool rounded_division) {
  const double want = double(T(expected));
  const double g = double(got);
  if (g == want) return true;
  if (!rounded_division) return false;
  int mantissa_bits = 52;
  if constexpr (std::is_same_v<T, float>) mantissa_bits = 23;
  if constexpr (std::is_same_v<T, BFloat16>) mantissa_bits = 7;
  if constexpr (std::is_same_v<T, Half>) mantissa_bits = 10;
  return std::abs(g - want) <= std::ldexp(std::abs(want), -mantissa_bits);
}

// Calls f(T{}) with the storage type of dt (a communication dtype).
template <class F>
void with_storage_type(DType dt, F&& f) {
  switch (dt) {
    case DType::kF32:
      return f(float{});
    case DType::kF64:
      return f(double{});
    case DType::kBF16:
      return f(BFloat16{});
    case DType::kF16:
      return f(Half{});
    case DType::kI32:
      return f(int32_t{});
    case DType::kI64:
      return f(int64_t{});
    default:
      SPMD_THROW(InvalidArgument, "spmd-bench: cannot check dtype ", dtype_name(dt));
  }
}

}  // namespace spmd::bench
