// The TCP backend's reduction loops against a plain scalar reference: every
// op on every dtype, odd lengths (the vector loops' tails), random values.
// bf16 and f16 results must match, bit for bit, widening both inputs to f32
// with tensor/half.h's conversions, combining, and rounding back with them:
// an implementation independent of reduce.cpp's bit tricks and F16C path.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "parallel/comm/tcp/reduce.h"
#include "tensor/half.h"

using namespace spmd;
using namespace spmd::dist;

namespace {

double apply(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return a + b;
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
  }
  return 0;
}

template <class T>
void check_op(ReduceOp op, size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-8.f, 8.f);
  std::vector<T> a(n), b(n), out(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = T(u(rng));
    b[i] = T(u(rng));
  }
  dist::tcp::combine(op, dtype_of<T>(), out.data(), a.data(), b.data(), n);
  for (size_t i = 0; i < n; ++i) {
    T want;
    if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>) {
      want = T(float(apply(op, float(a[i]), float(b[i]))));  // f32 math, rounded back
      REQUIRE(out[i].bits == want.bits);
    } else {
      want = T(apply(op, double(a[i]), double(b[i])));
      REQUIRE(out[i] == want);
    }
  }
}

}  // namespace

TEST_CASE("combine matches a scalar reference for every op and dtype", "[comm][reduce]") {
  std::mt19937 rng(7);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
    for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(1001)}) {
      INFO("op " << reduce_op_name(op) << ", n " << n);
      check_op<float>(op, n, rng);
      check_op<double>(op, n, rng);
      check_op<BFloat16>(op, n, rng);
      check_op<Half>(op, n, rng);
    }
  }
}

TEST_CASE("integer sums and products wrap instead of overflowing", "[comm][reduce]") {
  std::vector<int32_t> a = {INT32_MAX, 3}, b = {1, -7}, out(2);
  dist::tcp::combine(ReduceOp::kSum, DType::kI32, out.data(), a.data(), b.data(), 2);
  CHECK(out[0] == INT32_MIN);
  CHECK(out[1] == -4);
  std::vector<int64_t> c = {int64_t(1) << 62, -5}, d = {4, 6}, prod(2);
  dist::tcp::combine(ReduceOp::kProd, DType::kI64, prod.data(), c.data(), d.data(), 2);
  CHECK(prod[0] == 0);  // 2^64 wraps to 0
  CHECK(prod[1] == -30);
}

TEST_CASE("the fused average divides once, in place or not", "[comm][reduce]") {
  std::vector<float> a = {1, 2, 3}, b = {5, 6, 7}, out(3);
  dist::tcp::combine_and_divide(DType::kF32, out.data(), a.data(), b.data(), 3, 4);
  CHECK(out == std::vector<float>{1.5f, 2.f, 2.5f});
  std::vector<BFloat16> h = {BFloat16(3.f), BFloat16(-9.f)};
  dist::tcp::divide(DType::kBF16, h.data(), 2, 3);
  CHECK(float(h[0]) == 1.f);
  CHECK(float(h[1]) == -3.f);
  // dst aliasing an input, as the ring does.
  dist::tcp::combine(ReduceOp::kSum, DType::kF32, a.data(), a.data(), b.data(), 3);
  CHECK(a == std::vector<float>{6, 8, 10});
}

TEST_CASE("integer dtypes refuse to average", "[comm][reduce]") {
  std::vector<int32_t> a(2);
  CHECK_THROWS_AS(dist::tcp::divide(DType::kI32, a.data(), 2, 2), InvalidArgument);
}
