// Elementwise ops against naive f64 loops: one table of unary ops and one of
// binary ops, each run over dtypes, memory layouts (contiguous, transposed,
// strided) and shapes with size-0 and size-1 dims and broadcasting.
#include <cmath>

#include "reference.h"

using namespace spmd;
using namespace spmd::test;

namespace {

const std::vector<Shape> kShapes = {{}, {1}, {7}, {0, 3}, {3, 1}, {4, 5}, {2, 3, 33}, {2, 1, 5}};
const DType kFloatTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16};
const Layout kLayouts[] = {Layout::kContiguous, Layout::kTransposed, Layout::kStrided};

double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo = -3, hi = 3;  // the input domain
};

const std::vector<UnaryCase> kUnary = {
    {"neg", ops::neg, [](double x) { return -x; }},
    {"abs", ops::abs, [](double x) { return std::abs(x); }},
    {"exp", ops::exp, [](double x) { return std::exp(x); }},
    {"log", ops::log, [](double x) { return std::log(x); }, 0.1, 5},
    {"sqrt", ops::sqrt, [](double x) { return std::sqrt(x); }, 0.1, 5},
    {"rsqrt", ops::rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.1, 5},
    {"tanh", ops::tanh, [](double x) { return std::tanh(x); }},
    {"sigmoid", ops::sigmoid, sigmoid},
    {"relu", ops::relu, [](double x) { return x > 0 ? x : 0; }},
    {"gelu_tanh", [](const Tensor& t) { return ops::gelu(t, true); }, gelu_tanh},
    {"gelu_erf", [](const Tensor& t) { return ops::gelu(t, false); },
     [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
    {"silu", ops::silu, [](double x) { return x * sigmoid(x); }},
    {"sin", ops::sin, [](double x) { return std::sin(x); }},
    {"cos", ops::cos, [](double x) { return std::cos(x); }},
    {"square", ops::square, [](double x) { return x * x; }},
    {"reciprocal", ops::reciprocal, [](double x) { return 1 / x; }, 0.2, 4},
    {"sign", ops::sign, [](double x) { return double((x > 0) - (x < 0)); }},
};

struct BinaryCase {
  const char* name;
  BinaryOp op;
  std::function<double(double, double)> ref;
  double lo = -3, hi = 3;
};

double gelu_tanh_grad(double x) {
  const double k = std::sqrt(2 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

const std::vector<BinaryCase> kBinary = {
    {"add", BinaryOp::kAdd, [](double a, double b) { return a + b; }},
    {"sub", BinaryOp::kSub, [](double a, double b) { return a - b; }},
    {"mul", BinaryOp::kMul, [](double a, double b) { return a * b; }},
    {"div", BinaryOp::kDiv, [](double a, double b) { return a / b; }, 0.5, 3},
    {"pow", BinaryOp::kPow, [](double a, double b) { return std::pow(a, b); }, 0.5, 2},
    {"maximum", BinaryOp::kMaximum, [](double a, double b) { return std::max(a, b); }},
    {"minimum", BinaryOp::kMinimum, [](double a, double b) { return std::min(a, b); }},
    {"eq", BinaryOp::kEq, [](double a, double b) { return double(a == b); }},
    {"lt", BinaryOp::kLt, [](double a, double b) { return double(a < b); }},
    {"ge", BinaryOp::kGe, [](double a, double b) { return double(a >= b); }},
    {"relu_backward", BinaryOp::kReluBackward, [](double dy, double x) { return x > 0 ? dy : 0; }},
    {"gelu_tanh_backward", BinaryOp::kGeluTanhBackward,
     [](double dy, double x) { return dy * gelu_tanh_grad(x); }},
    {"gelu_erf_backward", BinaryOp::kGeluErfBackward,
     [](double dy, double x) {
       return dy * (0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
                    x * std::exp(-x * x / 2) / std::sqrt(2 * M_PI));
     }},
    {"silu_backward", BinaryOp::kSiluBackward,
     [](double dy, double x) { return dy * sigmoid(x) * (1 + x * (1 - sigmoid(x))); }},
    {"sigmoid_backward", BinaryOp::kSigmoidBackward,
     [](double dy, double y) { return dy * y * (1 - y); }},
    {"tanh_backward", BinaryOp::kTanhBackward,
     [](double dy, double y) { return dy * (1 - y * y); }},
};

// Pairs of shapes that broadcast, including size-0 and size-1 dims.
const std::vector<std::pair<Shape, Shape>> kBroadcastPairs = {
    {{4, 5}, {4, 5}}, {{3, 1}, {1, 4}}, {{2, 3, 4}, {4}},    {{0, 3}, {1, 3}},  {{1}, {6}},
    {{}, {2, 3}},     {{2, 3}, {}},     {{5, 1, 3}, {2, 1}}, {{7, 40}, {7, 1}}, {{1, 1}, {1, 1}},
};

}  // namespace

TEST_CASE("unary ops match a naive f64 loop in every dtype and layout", "[ops][unary]") {
  std::mt19937 rng(1);
  for (const UnaryCase& c : kUnary)
    for (DType dt : kFloatTypes)
      for (Layout layout : kLayouts)
        for (const Shape& shape : kShapes) {
          const Tensor x = random_tensor(rng, shape, dt, layout, c.lo, c.hi);
          const Ref rx(x);
          Ref want(shape);
          for (int64_t i = 0; i < want.numel(); ++i) want.v[i] = c.ref(rx.v[i]);
          const Tensor y = c.op(x);
          CHECK(y.dtype() == dt);
          check_close(y, want, rtol_for(dt) * 4, rtol_for(dt) * 4,
                      str_cat(c.name, " ", dtype_name(dt), " ", layout_name(layout), " ", shape));
        }
}

TEST_CASE("binary ops broadcast and match a naive f64 loop", "[ops][binary]") {
  std::mt19937 rng(2);
  for (const BinaryCase& c : kBinary)
    for (DType dt : {DType::kF32, DType::kF64, DType::kBF16})
      for (Layout layout : kLayouts)
        for (const auto& [sa, sb] : kBroadcastPairs) {
          const Tensor a = random_tensor(rng, sa, dt, layout, c.lo, c.hi);
          const Tensor b = random_tensor(rng, sb, dt, Layout::kContiguous, c.lo, c.hi);
          const Ref ra(a), rb(b);
          Ref want(ops::broadcast_shapes(sa, sb, "test"));
          for (int64_t i = 0; i < want.numel(); ++i) {
            const auto idx = unravel(want.shape, i);
            want.v[i] = c.ref(ra.at(idx), rb.at(idx));
          }
          const Tensor out = ops::binary(c.op, a, b);
          check_close(out, want, rtol_for(dt) * 4, rtol_for(dt) * 4,
                      str_cat(c.name, " ", dtype_name(dt), " ", layout_name(layout), " ", sa,
                              " with ", sb));
        }
}

TEST_CASE("integer arithmetic stays integral and exact", "[ops][binary]") {
  std::mt19937 rng(3);
  for (DType dt : {DType::kI32, DType::kI64, DType::kU8})
    for (const auto& [sa, sb] : kBroadcastPairs) {
      const Tensor a = random_tensor(rng, sa, dt, Layout::kStrided, 0, 9);
      const Tensor b = random_tensor(rng, sb, dt, Layout::kContiguous, 0, 9);
      const Ref ra(a), rb(b);
      for (BinaryOp op : {BinaryOp::kAdd, BinaryOp::kMul, BinaryOp::kMaximum, BinaryOp::kLt}) {
        Ref want(ops::broadcast_shapes(sa, sb, "test"));
        for (int64_t i = 0; i < want.numel(); ++i) {
          const auto idx = unravel(want.shape, i);
          const double x = ra.at(idx), y = rb.at(idx);
          want.v[i] = op == BinaryOp::kAdd       ? x + y
                      : op == BinaryOp::kMul     ? x * y
                      : op == BinaryOp::kMaximum ? std::max(x, y)
                                                 : double(x < y);
        }
        const Tensor out = ops::binary(op, a, b);
        CHECK(out.dtype() == (op == BinaryOp::kLt ? DType::kBool : dt));
        check_close(out, want, 0, 0, str_cat(op_name(op), " ", dtype_name(dt), " ", sa, sb));
      }
    }
}

TEST_CASE("dtypes promote as in PyTorch", "[ops][binary]") {
  const Tensor i = ops::arange(int64_t(4));  // i64
  const Tensor f = ops::full({4}, 0.5);      // f32
  CHECK(ops::add(i, f).dtype() == DType::kF32);
  CHECK(ops::div(i, ops::full({4}, 2, {DType::kI64})).dtype() == DType::kF32);  // true division
  CHECK(ops::to_vector<float>(ops::div(i, 2.0)) == std::vector<float>{0, 0.5, 1, 1.5});
  CHECK(ops::mul(i, 2.0).dtype() == DType::kI64);  // an integral scalar
  CHECK(ops::mul(i, 0.5).dtype() == DType::kF32);  // a fraction
  CHECK(ops::lt(i, 1.5).dtype() == DType::kBool);
  CHECK(ops::to_vector<bool>(ops::lt(i, 1.5)) == std::vector<bool>{true, true, false, false});
  CHECK(ops::exp(i).dtype() == DType::kF32);
  CHECK(ops::add(ops::full({2}, 1, {DType::kBF16}), ops::full({2}, 1, {DType::kF16})).dtype() ==
        DType::kF32);
}

TEST_CASE("scalar ops, in-place ops and clamp", "[ops][binary]") {
  const Tensor x = ops::from_vector<float>({-2, -0.5, 0, 1, 3}, {5});
  CHECK(ops::to_vector<float>(ops::sub(1.0, x)) == std::vector<float>{3, 1.5, 1, 0, -2});
  CHECK(ops::to_vector<float>(ops::div(1.0, ops::add(x, 3))) ==
        std::vector<float>{1, 1 / 2.5f, 1 / 3.f, 0.25f, 1 / 6.f});
  CHECK(ops::to_vector<float>(ops::pow(x, 2)) == std::vector<float>{4, 0.25, 0, 1, 9});
  CHECK(ops::to_vector<float>(ops::clamp(x, -1, 1)) == std::vector<float>{-1, -0.5, 0, 1, 1});
  CHECK(ops::to_vector<int64_t>(ops::pow(ops::arange(int64_t(4)), 3)) ==
        std::vector<int64_t>{0, 1, 8, 27});

  Tensor t = ops::clone(x);
  const uint64_t v0 = t.storage()->version();
  ops::add_(t, ops::ones({5}), 2);  // t += 2
  ops::mul_(t, 2.0);
  CHECK(ops::to_vector<float>(t) == std::vector<float>{0, 3, 4, 6, 10});
  CHECK(t.storage()->version() > v0);  // autograd can see the writes
  Tensor row = ops::zeros({2, 3});
  ops::add_(row, ops::from_vector<float>({1, 2, 3}, {3}));  // broadcast into t
  CHECK(ops::to_vector<float>(row) == std::vector<float>{1, 2, 3, 1, 2, 3});
  Tensor view = ops::transpose(row, 0, 1);  // in place through a view writes the base
  ops::fill_(view, 7);
  CHECK(ops::to_vector<float>(row) == std::vector<float>(6, 7));
  Tensor ints = ops::arange(int64_t(3));
  CHECK_THROWS_WITH(ops::mul_(ints, 0.5), Catch::Contains("cannot be stored in a i64 tensor"));
}

TEST_CASE("NaN propagates through maximum and minimum", "[ops][binary]") {
  const Tensor a = ops::from_vector<float>({NAN, 1, 2}, {3});
  const Tensor b = ops::from_vector<float>({0, NAN, 1}, {3});
  const std::vector<float> mx = ops::to_vector<float>(ops::maximum(a, b));
  CHECK(std::isnan(mx[0]));
  CHECK(std::isnan(mx[1]));
  CHECK(mx[2] == 2);
}

TEST_CASE("where, masked_fill, tril and triu", "[ops][select]") {
  std::mt19937 rng(4);
  for (Layout layout : kLayouts) {
    const Tensor x = random_tensor(rng, {4, 6}, DType::kF32, layout);
    const Tensor y = random_tensor(rng, {6}, DType::kF32, Layout::kContiguous);
    const Tensor cond = ops::gt(x, 0.0);
    const Ref rx(x), ry(y);
    Ref want_where({4, 6}), want_fill({4, 6}), want_tril({4, 6}), want_triu({4, 6});
    for (int64_t i = 0; i < 24; ++i) {
      const int64_t r = i / 6, c = i % 6;
      want_where.v[i] = rx.v[i] > 0 ? rx.v[i] : ry.v[c];
      want_fill.v[i] = rx.v[i] > 0 ? -1 : rx.v[i];
      want_tril.v[i] = c - r <= 1 ? rx.v[i] : 0;
      want_triu.v[i] = c - r >= -1 ? rx.v[i] : 0;
    }
    check_close(ops::where(cond, x, y), want_where, 0, 0, "where");
    check_close(ops::masked_fill(x, cond, -1), want_fill, 0, 0, "masked_fill");
    check_close(ops::tril(x, 1), want_tril, 0, 0, "tril");
    check_close(ops::triu(x, -1), want_triu, 0, 0, "triu");
  }
  const Tensor mask = ops::tril(ops::ones({3, 3}, {DType::kBool}));  // a causal mask
  CHECK(ops::to_vector<bool>(mask) ==
        std::vector<bool>{true, false, false, true, true, false, true, true, true});
}

TEST_CASE("copies convert between every pair of dtypes", "[ops][copy]") {
  const std::vector<double> values = {0, 1, -3, 2.5, 100, -0.75, 7};
  const Tensor src = ops::from_vector(values, {7});
  const DType all[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                       DType::kI32, DType::kI64, DType::kU8,   DType::kBool};
  for (DType a : all)
    for (DType b : all) {
      const Tensor x = ops::to(src, a), y = ops::to(ops::transpose(ops::view(x, {7, 1}), 0, 1), b);
      const std::vector<double> via_a = ops::to_vector<double>(x), got = ops::to_vector<double>(y);
      for (size_t i = 0; i < values.size(); ++i) {
        double want = via_a[i];
        if (b == DType::kBool)
          want = want != 0;
        else if (!is_floating(b))
          want = std::trunc(want);
        if (b == DType::kU8 && via_a[i] < 0) continue;  // out of range for u8, as a C cast
        CHECK(got[i] == Approx(want).epsilon(1e-2));
      }
    }
}
