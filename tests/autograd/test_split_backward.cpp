// The backward split in two passes (engine.h, run_backward_input): the
// input pass gives the chosen inputs exactly the gradients one backward
// gives them and touches no weight; the weight pass then gives every weight
// exactly what one backward gives it. Checked on a small network of linears,
// a norm and a weight used twice against one ordinary backward; plus which
// gradients each pass asks a node for, what the input pass keeps, a node
// that computes both gradients at once (run once), a first stage with no
// input (all the work in the weight pass), and the misuses.
#include <catch2/catch.hpp>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/engine.h"
#include "tensor/ops.h"

using namespace spmd;

namespace {

Tensor param(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = ops::randn(shape, {DType::kF64}, &gen);
  t.requires_grad_();
  return t;
}

struct Net {
  Tensor w1 = param({6, 4}, 1), b1 = param({6}, 2), g = param({6}, 3), w2 = param({6, 6}, 4);
  std::vector<Tensor> weights() const { return {w1, b1, g, w2}; }
  // x (3, 4) -> (3, 6): linear, RMS norm, linear, then w2 again (used twice).
  Tensor operator()(const Tensor& x) const {
    Tensor h = linear(x, w1, b1);
    h = rms_norm(h, g);
    return mul(linear(h, w2), linear(h, w2));
  }
};

std::vector<double> values(const Tensor& t) { return ops::to_vector<double>(t); }

void check_close(const Tensor& a, const Tensor& b) {
  REQUIRE(a.defined());
  REQUIRE(b.defined());
  const std::vector<double> va = values(a), vb = values(b);
  REQUIRE(va.size() == vb.size());
  for (size_t i = 0; i < va.size(); ++i) CHECK(va[i] == Approx(vb[i]).epsilon(1e-12));
}

// Records which input gradients the pass asks of it, passes x through.
struct Probe : autograd::Function<Probe> {
  static constexpr const char* kName = "probe";
  static inline std::vector<std::vector<bool>> asked;
  static Tensor forward(autograd::FunctionCtx&, const Tensor& x, const Tensor& w) {
    return ops::mul(x, w);
  }
  static autograd::TensorList backward(autograd::FunctionCtx& ctx,
                                       const autograd::TensorList& grads) {
    asked.push_back({ctx.needs_input_grad(0), ctx.needs_input_grad(1)});
    // Not the true gradients (only what is asked is checked), and only those asked for.
    return {ctx.needs_input_grad(0) ? grads[0] : Tensor(),
            ctx.needs_input_grad(1) ? grads[0] : Tensor()};
  }
};

// x * w whose backward computes both gradients whatever is asked, as one
// fused kernel does (a norm's dx and gain); counts its runs.
struct Fused : autograd::Function<Fused> {
  static constexpr const char* kName = "fused";
  static inline int runs = 0;
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x, const Tensor& w) {
    ctx.save_for_backward({x, w});
    return ops::mul(x, w);
  }
  static autograd::TensorList backward(autograd::FunctionCtx& ctx,
                                       const autograd::TensorList& grads) {
    ++runs;
    const autograd::TensorList saved = ctx.saved_tensors();
    return {ops::mul(grads[0], saved[1]), ops::mul(grads[0], saved[0])};
  }
};

}  // namespace

TEST_CASE("input pass then weight pass give what one backward gives", "[autograd][split]") {
  const Net net;
  Generator gen(7);
  const Tensor seed = ops::randn({3, 6}, {DType::kF64}, &gen);
  Tensor x_ref = param({3, 4}, 9), x = param({3, 4}, 9);
  backward(net(x_ref), seed);  // the reference: one backward
  std::vector<Tensor> want;
  for (const Tensor& w : net.weights()) want.push_back(ops::clone(w.grad()));
  for (const Tensor& w : net.weights()) w.autograd_meta()->grad = Tensor();

  autograd::WeightBackward weights = backward_input(net(x), seed, {x});
  check_close(x.grad(), x_ref.grad());
  for (const Tensor& w : net.weights()) CHECK_FALSE(w.grad().defined());  // no weight yet
  // Kept: both uses of w2, the norm (its gain) and the first linear (w1, b1).
  CHECK(weights.num_deferred() == 4);
  backward_weight(weights);
  for (size_t i = 0; i < want.size(); ++i) check_close(net.weights()[i].grad(), want[i]);
  CHECK_THROWS_WITH(weights.run(), Catch::Contains("already run"));
}

TEST_CASE("with no input, the weight pass runs the whole backward", "[autograd][split]") {
  const Net net;
  Tensor x = ops::ones({3, 4}, {DType::kF64});  // ids, say: nothing to send back
  backward(sum(net(x)));
  std::vector<Tensor> want;
  for (const Tensor& w : net.weights()) want.push_back(ops::clone(w.grad()));
  for (const Tensor& w : net.weights()) w.autograd_meta()->grad = Tensor();
  autograd::WeightBackward weights = backward_input(sum(net(x)), {}, {});
  CHECK(weights.num_deferred() == 1);  // the root itself
  for (const Tensor& w : net.weights()) CHECK_FALSE(w.grad().defined());
  weights.run();
  for (size_t i = 0; i < want.size(); ++i) check_close(net.weights()[i].grad(), want[i]);
}

TEST_CASE("each pass asks a node only for its own gradients", "[autograd][split]") {
  Probe::asked.clear();
  Tensor x = param({2}, 1), w = param({2}, 2);
  autograd::WeightBackward weights = backward_input(sum(Probe::apply(x, w)), {}, {x});
  weights.run();
  REQUIRE(Probe::asked.size() == 2);
  CHECK(Probe::asked[0] == std::vector<bool>{true, false});  // the input pass: dx
  CHECK(Probe::asked[1] == std::vector<bool>{false, true});  // the weight pass: dw
  Probe::asked.clear();
  backward(sum(Probe::apply(x, w)));  // an ordinary backward asks for both
  CHECK(Probe::asked == std::vector<std::vector<bool>>{{true, true}});
}

TEST_CASE("a node that computes its weight's gradient in the input pass runs once",
          "[autograd][split]") {
  Tensor x_ref = param({3}, 1), w_ref = param({3}, 2), x = param({3}, 1), w = param({3}, 2);
  Fused::runs = 0;
  backward(sum(mul(Fused::apply(x_ref, w_ref), x_ref)));  // the reference: one backward
  REQUIRE(Fused::runs == 1);
  autograd::WeightBackward weights = backward_input(sum(mul(Fused::apply(x, w), x)), {}, {x});
  CHECK(Fused::runs == 2);
  check_close(x.grad(), x_ref.grad());
  CHECK_FALSE(w.grad().defined());  // kept for the weight pass, not yet accumulated
  CHECK(weights.num_deferred() == 1);
  backward_weight(weights);
  CHECK(Fused::runs == 2);  // handed on, not run again
  check_close(w.grad(), w_ref.grad());
}

TEST_CASE("split backward misuses are refused, naming the input", "[autograd][split][errors]") {
  Tensor x = param({2}, 1), w = param({2}, 2), unused = param({2}, 3);
  const Tensor y = sum(mul(x, w));
  CHECK_THROWS_WITH(backward_input(y, {}, {mul(x, w)}),
                    Catch::Contains("input 0 (shape [2]) is not a leaf that requires grad"));
  CHECK_THROWS_WITH(backward_input(y, {}, {x, unused}),
                    Catch::Contains("input 1 (shape [2]) is not used in the graph"));
}
