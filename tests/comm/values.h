// The values the comm tests send, and the results worked out by hand. Rank r
// contributes (r+1)·(1 + i mod 5) at index i, so over p ranks:
//   sum = p(p+1)/2 · (1 + i mod 5)   avg = (p+1)/2 · (...)
//   max = p · (...)                  min = 1 · (...)
// For prod the factors are 1 or 2 ((i + r) mod 2 + 1) so every partial
// product stays exact. All of these are small integers or halves, exact in
// bf16 and f16 as well, so every dtype is compared for equality.
#pragma once

#include <cstddef>

#include "parallel/comm/types.h"

namespace spmd::dist::testing {

inline double input_value(ReduceOp op, int r, size_t i) {
  if (op == ReduceOp::kProd) return 1 + double((i + r) % 2);
  return (r + 1) * double(1 + i % 5);
}

inline double reduced_value(ReduceOp op, int p, size_t i) {
  const double k = double(1 + i % 5);
  switch (op) {
    case ReduceOp::kSum:
      return p * (p + 1) / 2.0 * k;
    case ReduceOp::kAvg:
      return (p + 1) / 2.0 * k;
    case ReduceOp::kMax:
      return p * k;
    case ReduceOp::kMin:
      return k;
    case ReduceOp::kProd: {
      double prod = 1;
      for (int r = 0; r < p; ++r) prod *= 1 + double((i + r) % 2);
      return prod;
    }
  }
  return 0;
}

}  // namespace spmd::dist::testing
