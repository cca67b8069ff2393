// Reductions and matrix products against naive f64 loops, on small shapes
// (with size-0 and size-1 dims, every layout) and on large ones that take the
// multi-threaded paths.
#include <cmath>

#include "reference.h"

using namespace spmd;
using namespace spmd::test;

namespace {

// The naive reduction of x over `dims` (keepdim shape), with op one of
// "sum", "mean", "amax", "amin", "prod", "var".
Ref reduce_ref(const Ref& x, const std::vector<int>& dims, const std::string& op) {
  Shape out_shape = x.shape;
  for (int d : dims) out_shape[d] = 1;
  Ref out(out_shape);
  std::vector<std::vector<double>> groups(size_t(out.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const auto idx = unravel(x.shape, i);
    groups[size_t(out.flat(idx))].push_back(x.v[size_t(i)]);
  }
  for (size_t o = 0; o < groups.size(); ++o) {
    const std::vector<double>& g = groups[o];
    double s = 0, p = 1, mx = -INFINITY, mn = INFINITY;
    for (double v : g) s += v, p *= v, mx = std::max(mx, v), mn = std::min(mn, v);
    const double mean = s / double(g.size());
    double ss = 0;
    for (double v : g) ss += (v - mean) * (v - mean);
    out.v[o] = op == "sum"    ? s
               : op == "mean" ? mean
               : op == "amax" ? mx
               : op == "amin" ? mn
               : op == "prod" ? p
                              : ss / double(g.size() - 1);
  }
  return out;
}

Tensor run_reduce(const std::string& op, const Tensor& x, const std::vector<int>& dims) {
  if (op == "sum") return ops::sum(x, dims, true);
  if (op == "mean") return ops::mean(x, dims, true);
  if (op == "amax") return ops::amax(x, dims, true);
  if (op == "amin") return ops::amin(x, dims, true);
  if (op == "prod") return ops::prod(x, dims, true);
  return ops::var(x, dims, 1, true);
}

// The naive (..., M, K) @ (..., K, N) with broadcast batch dims.
Ref matmul_ref(const Ref& a, const Ref& b, const Shape& out_shape) {
  Ref out(out_shape);
  const int64_t K = a.shape.back();
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = unravel(out_shape, i);
    const size_t nd = idx.size();
    const int64_t m = idx[nd - 2], n = idx[nd - 1];
    double s = 0;
    for (int64_t k = 0; k < K; ++k) {
      idx[nd - 2] = m, idx[nd - 1] = k;
      const double x = a.at(idx);
      idx[nd - 2] = k, idx[nd - 1] = n;
      s += x * b.at(idx);
    }
    out.v[size_t(i)] = s;
  }
  return out;
}

}  // namespace

TEST_CASE("reductions over any dims match a naive loop", "[ops][reduce]") {
  std::mt19937 rng(10);
  const std::vector<std::pair<Shape, std::vector<int>>> cases = {
      {{5}, {0}},       {{4, 7}, {1}},       {{4, 7}, {0}},     {{4, 7}, {0, 1}},
      {{3, 1, 5}, {1}}, {{2, 3, 4}, {0, 2}}, {{2, 3, 4}, {1}},  {{2, 3, 4}, {-1, -2}},
      {{0, 4}, {1}},    {{1, 1}, {0, 1}},    {{6, 33, 2}, {1}}, {{}, {}},
  };
  for (const std::string op : {"sum", "mean", "amax", "amin", "prod", "var"})
    for (DType dt : {DType::kF32, DType::kF64, DType::kBF16})
      for (Layout layout : {Layout::kContiguous, Layout::kTransposed, Layout::kStrided})
        for (const auto& [shape, dims] : cases) {
          if ((op == "amax" || op == "amin") && shape.numel() == 0) continue;
          const Tensor x = random_tensor(rng, shape, dt, layout, 0.5, 1.5);
          std::vector<int> wrapped;
          for (int d : dims) wrapped.push_back(d < 0 ? d + shape.ndim() : d);
          const Ref want = reduce_ref(Ref(x), shape.ndim() ? wrapped : std::vector<int>{}, op);
          const Tensor got = run_reduce(op, x, dims);
          check_close(got, want, rtol_for(dt) * 8, 1e-6,
                      str_cat(op, " ", dtype_name(dt), " ", layout_name(layout), " ", shape));
        }
}

TEST_CASE("large reductions take the threaded paths and stay accurate", "[ops][reduce]") {
  std::mt19937 rng(11);
  // (few outputs, long rows): threads split each row; (many rows, few
  // columns) and (rows, 384): the column-tile plan; all of it: one output.
  for (const auto& [shape, dims] : std::vector<std::pair<Shape, std::vector<int>>>{
           {{3, 200000}, {1}}, {{200000, 3}, {0}}, {{1024, 384}, {0}}, {{700, 900}, {}}}) {
    const Tensor x = random_tensor(rng, shape, DType::kF32, Layout::kContiguous, -1, 1);
    const Ref rx(x);
    std::vector<int> all = dims;
    if (all.empty()) all = {0, 1};
    check_close(ops::sum(x, dims, true), reduce_ref(rx, all, "sum"), 1e-4, 1e-3,
                str_cat("sum ", shape));
    check_close(ops::amax(x, dims, true), reduce_ref(rx, all, "amax"), 0, 0,
                str_cat("amax ", shape));
  }
}

TEST_CASE("reduction dtypes, keepdim and errors", "[ops][reduce]") {
  const Tensor i = ops::arange(int64_t(6), {DType::kI32});
  CHECK(ops::sum(i).dtype() == DType::kI64);  // integer sums widen
  CHECK(ops::sum(i).item<int64_t>() == 15);
  CHECK(ops::amax(i).dtype() == DType::kI32);
  CHECK(ops::sum(ops::ones({2, 3}, {DType::kBool})).item<int64_t>() == 6);
  const Tensor x = ops::reshape(ops::arange(0, 6, 1, {DType::kF32}), {2, 3});
  CHECK(ops::sum(x, {1}).shape() == Shape{2});
  CHECK(ops::sum(x, {1}, true).shape() == Shape{2, 1});
  CHECK(ops::sum(x).shape() == Shape{});
  CHECK(ops::sum(ops::zeros({0, 3})).item<float>() == 0);  // the empty sum
  CHECK(ops::prod(ops::zeros({0})).item<float>() == 1);
  CHECK_THROWS_WITH(ops::mean(i), Catch::Contains("mean: expected a floating-point tensor"));
  CHECK_THROWS_WITH(ops::sum(x, {2}), Catch::Contains("sum: dim 2 is out of range"));
  CHECK_THROWS_WITH(ops::sum(x, {1, -1}), Catch::Contains("appears twice"));
  CHECK_THROWS_WITH(ops::amax(ops::zeros({0, 3}), {0}), Catch::Contains("empty dim"));
  CHECK(std::isnan(ops::amax(ops::from_vector<float>({1, NAN, 3}, {3})).item<float>()));
}

TEST_CASE("argmax and argmin pick the first extreme", "[ops][reduce]") {
  const Tensor x = ops::from_vector<float>({1, 5, 5, 0, 0, 2, 7, -1, 7}, {3, 3});
  CHECK(ops::to_vector<int64_t>(ops::argmax(x, 1)) == std::vector<int64_t>{1, 2, 0});
  CHECK(ops::to_vector<int64_t>(ops::argmin(x, 1)) == std::vector<int64_t>{3 - 3, 0, 1});
  CHECK(ops::to_vector<int64_t>(ops::argmax(x, 0)) == std::vector<int64_t>{2, 0, 2});
  CHECK(ops::argmax(x, 0, true).shape() == Shape{1, 3});
  CHECK(ops::to_vector<int64_t>(ops::argmax(ops::transpose(x, 0, 1), 1)) ==
        std::vector<int64_t>{2, 0, 2});
  CHECK_THROWS_WITH(ops::argmax(ops::zeros({2, 0}), 1), Catch::Contains("dim 1 of size 0"));
}

TEST_CASE("sum_to undoes broadcasting", "[ops][reduce]") {
  const Tensor g = ops::ones({2, 3, 4});
  CHECK(ops::to_vector<float>(ops::sum_to(g, {4})) == std::vector<float>(4, 6));
  CHECK(ops::to_vector<float>(ops::sum_to(g, {3, 1})) == std::vector<float>(3, 8));
  CHECK(ops::sum_to(g, {1, 3, 1}).shape() == Shape{1, 3, 1});
  CHECK_THROWS_WITH(ops::sum_to(g, {5}), Catch::Contains("do not broadcast"));
}

TEST_CASE("matmul matches a naive loop for every shape rule", "[ops][matmul]") {
  std::mt19937 rng(12);
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4}, {4, 5}},        {{1, 1}, {1, 1}},
      {{0, 3}, {3, 4}},        {{3, 0}, {0, 4}},
      {{5, 2}, {2, 0}},        {{4}, {4, 3}},
      {{3, 4}, {4}},           {{4}, {4}},
      {{2, 3, 4}, {4, 5}},     {{2, 1, 3, 4}, {5, 4, 2}},
      {{7, 16, 9}, {7, 9, 3}}, {{33, 65}, {65, 17}},
  };
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16})
    for (Layout la : {Layout::kContiguous, Layout::kTransposed, Layout::kStrided})
      for (Layout lb : {Layout::kContiguous, Layout::kTransposed})
        for (const auto& [sa, sb] : cases) {
          const Tensor a = random_tensor(rng, sa, dt, la), b = random_tensor(rng, sb, dt, lb);
          // The naive product on 2-D-or-more views; 1-D operands as PyTorch treats them.
          const Tensor a2 = sa.ndim() == 1 ? ops::unsqueeze(a, 0) : a;
          const Tensor b2 = sb.ndim() == 1 ? ops::unsqueeze(b, 1) : b;
          Shape batch = ops::broadcast_shapes(
              Shape(std::span<const int64_t>(a2.shape().begin(), a2.ndim() - 2)),
              Shape(std::span<const int64_t>(b2.shape().begin(), b2.ndim() - 2)), "test");
          batch.push_back(a2.size(-2));
          batch.push_back(b2.size(-1));
          Ref want = matmul_ref(Ref(a2), Ref(b2), batch);
          const Tensor got = ops::matmul(a, b);
          want.shape = got.shape();  // the 1-D dims dropped; same values in the same order
          const double tol = dt == DType::kBF16 ? 3e-2 : dt == DType::kF32 ? 1e-4 : 1e-10;
          check_close(got, want, tol, tol * 10,
                      str_cat("matmul ", dtype_name(dt), " ", layout_name(la), " ", layout_name(lb),
                              " ", sa, " @ ", sb));
        }
}

TEST_CASE("large products, linear and matmul_out with alpha and beta", "[ops][matmul]") {
  std::mt19937 rng(13);
  const Tensor a = random_tensor(rng, {4, 64, 96}, DType::kF32, Layout::kContiguous);
  const Tensor w = random_tensor(rng, {200, 96}, DType::kF32, Layout::kContiguous);
  const Tensor bias = random_tensor(rng, {200}, DType::kF32, Layout::kContiguous);
  // linear: x W^T + b, the batch folded into one GEMM over a transposed weight.
  const Tensor y = ops::linear(a, w, bias);
  Ref want = matmul_ref(Ref(a), Ref(ops::contiguous(ops::transpose(w, 0, 1))), {4, 64, 200});
  const Ref rb(bias);
  for (int64_t i = 0; i < want.numel(); ++i) want.v[size_t(i)] += rb.v[size_t(i % 200)];
  check_close(y, want, 1e-4, 1e-4, "linear");
  // A batch that does not fold (a transposed batch dim) gives the same.
  const Tensor at = ops::transpose(ops::contiguous(ops::transpose(a, 0, 1)), 0, 1);
  check_close(ops::linear(at, w, bias), want, 1e-4, 1e-4, "linear, unfoldable batch");
  // out = 2 a b + 0.5 out
  const Tensor m = random_tensor(rng, {300, 200}, DType::kF32, Layout::kContiguous);
  const Tensor n = random_tensor(rng, {200, 100}, DType::kF32, Layout::kTransposed);
  Tensor out = random_tensor(rng, {300, 100}, DType::kF32, Layout::kContiguous);
  Ref want_out = matmul_ref(Ref(m), Ref(n), {300, 100});
  const Ref before(out);
  for (int64_t i = 0; i < want_out.numel(); ++i)
    want_out.v[size_t(i)] = 2 * want_out.v[size_t(i)] + 0.5 * before.v[size_t(i)];
  ops::matmul_out(out, m, n, 2, 0.5);
  check_close(out, want_out, 1e-4, 1e-3, "matmul_out");
  Tensor tout = ops::transpose(ops::zeros({100, 300}), 0, 1);  // a column-major out
  ops::matmul_out(tout, m, n);
  check_close(tout, matmul_ref(Ref(m), Ref(n), {300, 100}), 1e-4, 1e-3, "column-major out");
}

TEST_CASE("matmul rejects what cannot be multiplied", "[ops][matmul]") {
  CHECK_THROWS_WITH(
      ops::matmul(ops::zeros({2, 3}), ops::zeros({4, 5})),
      Catch::Contains("matmul: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)"));
  CHECK_THROWS_WITH(
      ops::matmul(ops::zeros({2, 3}, {DType::kI64}), ops::zeros({3, 5}, {DType::kI64})),
      Catch::Contains("floating-point"));
  CHECK_THROWS_WITH(ops::matmul(ops::zeros({2, 2, 3}), ops::zeros({3, 3, 5})),
                    Catch::Contains("do not broadcast"));
  CHECK_THROWS_WITH(ops::matmul(ops::zeros({}), ops::zeros({3})),
                    Catch::Contains("at least 1 dim"));
  CHECK_THROWS_WITH(ops::linear(ops::zeros({2, 3}), ops::zeros({4, 5})),
                    Catch::Contains("in_features 5"));
}
