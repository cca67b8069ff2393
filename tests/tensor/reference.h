// Helpers for checking tensor ops against naive reference loops in f64, in
// the manner of ggml's test-backend-ops: random inputs in every layout
// (contiguous, transposed, strided, broadcast), a host f64 copy of each
// tensor, and a comparison with a tolerance fitting the dtype.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tensor/ops.h"

namespace spmd::test {

// A tensor's values in f64, row-major, with its shape: what references read.
struct Ref {
  Shape shape;
  std::vector<double> v;

  explicit Ref(const Shape& s) : shape(s), v(size_t(s.numel()), 0.0) {}
  explicit Ref(const Tensor& t) : shape(t.shape()), v(ops::to_vector<double>(t)) {}

  int64_t numel() const { return shape.numel(); }
  // The row-major index of idx; a size-1 dim of this tensor reads index 0
  // whatever idx says (broadcasting), and missing leading dims are ignored.
  int64_t flat(const std::vector<int64_t>& idx) const {
    int64_t f = 0;
    const int lead = int(idx.size()) - shape.ndim();
    for (int d = 0; d < shape.ndim(); ++d) f = f * shape[d] + (shape[d] == 1 ? 0 : idx[lead + d]);
    return f;
  }
  double at(const std::vector<int64_t>& idx) const { return v[size_t(flat(idx))]; }
};

// The multi-index of row-major element i of shape.
inline std::vector<int64_t> unravel(const Shape& shape, int64_t i) {
  std::vector<int64_t> idx(size_t(shape.ndim()));
  for (int d = shape.ndim() - 1; d >= 0; --d) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

enum class Layout { kContiguous, kTransposed, kStrided };
inline const char* layout_name(Layout l) {
  return l == Layout::kContiguous   ? "contiguous"
         : l == Layout::kTransposed ? "transposed"
                                    : "strided";
}

// A random tensor of `shape` and `dtype` whose memory is laid out as asked:
// transposed (the last two dims swapped in memory) or strided (every other
// element of a larger tensor along dim 0). Values uniform in [lo, hi),
// rounded for integer dtypes.
Tensor random_tensor(std::mt19937& rng, const Shape& shape, DType dtype, Layout layout,
                     double lo = -2, double hi = 2);

// Checks every element of `got` against `want` with |got - want| <= atol +
// rtol |want| (NaNs must match), naming the first mismatch.
void check_close(const Tensor& got, const Ref& want, double rtol, double atol,
                 const std::string& what);

// Tolerances for results rounded to `dtype` after an f32 (or f64) computation.
inline double rtol_for(DType dt) {
  switch (dt) {
    case DType::kF64:
      return 1e-10;
    case DType::kF32:
      return 2e-5;
    case DType::kBF16:
      return 1.6e-2;
    case DType::kF16:
      return 2e-3;
    default:
      return 0;
  }
}

inline std::string str(const Shape& s) { return str_cat(s); }

}  // namespace spmd::test
