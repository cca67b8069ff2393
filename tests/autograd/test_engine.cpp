// The engine's behaviour, checked on graphs small enough to differentiate by
// hand: recording rules (grad mode, requires_grad, detach), accumulation of a
// tensor used twice and of a linear's weight gradient into .grad (the fused
// path and the hooks that turn it off), retain_graph, a 10,000-deep chain (no recursion),
// saved-tensor version checks, hook order, custom Functions and activation
// checkpointing.
#include <pthread.h>

#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/checkpoint.h"
#include "autograd/engine.h"
#include "tensor/ops.h"

using namespace spmd;

namespace {

Tensor leaf(std::vector<double> v, const Shape& shape) {
  Tensor t = ops::from_vector(v, shape);
  t.requires_grad_();
  return t;
}

std::vector<double> values(const Tensor& t) { return ops::to_vector<double>(t); }

// Runs fn on a new thread whose stack is 256 KiB (the default is 8 MiB).
void run_on_small_stack(const std::function<void()>& fn) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_t thread;
  auto trampoline = [](void* arg) -> void* {
    (*static_cast<const std::function<void()>*>(arg))();
    return nullptr;
  };
  REQUIRE(pthread_create(&thread, &attr, trampoline, const_cast<std::function<void()>*>(&fn)) == 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
}

}  // namespace

TEST_CASE("recording follows grad mode and requires_grad", "[autograd]") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor c = ops::from_vector(std::vector<double>{4, 5, 6}, {3});
  CHECK(mul(x, c).requires_grad());
  CHECK_FALSE(mul(c, c).requires_grad());  // no input requires grad: nothing recorded
  CHECK(grad_fn_name(mul(x, c)) == "mul");
  {
    NoGradGuard no_grad;
    Tensor y = mul(x, c);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
    EnableGradGuard on;
    CHECK(mul(x, c).requires_grad());
  }
  CHECK(autograd::grad_mode_enabled());
  Tensor d = detach(mul(x, c));
  CHECK_FALSE(d.requires_grad());
  CHECK(values(d) == std::vector<double>{4, 10, 18});
}

TEST_CASE("d/dx of x*x + 3x is 2x + 3, and gradients accumulate across calls", "[autograd]") {
  Tensor x = leaf({1, -2, 0.5}, {3});
  backward(sum(add(mul(x, x), mul(x, 3.0))));  // x used three times
  CHECK(values(x.grad()) == std::vector<double>{5, -1, 4});
  backward(sum(mul(x, 2.0)));  // a second backward adds into .grad
  CHECK(values(x.grad()) == std::vector<double>{7, 1, 6});
}

TEST_CASE("a linear's later weight gradients add straight into .grad, hooks or not",
          "[autograd][accumulation]") {
  // w (3, 2); the rows of dW of sum(x w^T) are each x's column sums.
  const Tensor x1 = ops::from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2});  // sums 4, 6
  const Tensor x2 = ops::from_vector(std::vector<double>{1, 1, 0, 2}, {2, 2});  // sums 1, 3
  auto rows = [](double a, double b) { return std::vector<double>{a, b, a, b, a, b}; };
  Tensor w = leaf({1, 2, 3, 4, 5, 6}, {3, 2});
  CHECK_FALSE(autograd::accumulable_grad(w, {3, 2}).defined());  // no .grad yet
  backward(sum(linear(x1, w)));
  REQUIRE(values(w.grad()) == rows(4, 6));
  const Tensor first = w.grad();
  // From now on the GEMM adds into w.grad itself (beta = 1).
  CHECK(autograd::accumulable_grad(w, {3, 2}).storage() == first.storage());
  CHECK_FALSE(autograd::accumulable_grad(w, {2, 3}).defined());  // another shape
  backward(sum(mul(linear(x2, w), 2.0)));
  CHECK(values(w.grad()) == rows(6, 12));
  CHECK(w.grad().storage() == first.storage());
  // Used twice in one backward: one use adds in place, both arrive.
  backward(add(sum(linear(x1, w)), sum(linear(x2, w))));
  CHECK(values(w.grad()) == rows(11, 21));

  SECTION("a hook on the leaf sees every gradient: the plain path") {
    std::vector<std::vector<double>> seen;
    register_hook(w, [&](const Tensor& g) {
      seen.push_back(values(g));
      return Tensor();
    });
    CHECK_FALSE(autograd::accumulable_grad(w, {3, 2}).defined());
    backward(sum(linear(x2, w)));
    CHECK(seen == std::vector<std::vector<double>>{rows(1, 3)});
    CHECK(values(w.grad()) == rows(12, 24));
  }
  SECTION("a post-accumulate hook fires after each backward: the plain path") {
    int fired = 0;
    register_post_accumulate_grad_hook(w, [&](const Tensor& leaf) {
      ++fired;
      CHECK(values(leaf.grad()) == rows(12, 24));
    });
    CHECK_FALSE(autograd::accumulable_grad(w, {3, 2}).defined());
    backward(sum(linear(x2, w)));
    CHECK(fired == 1);
  }
  SECTION("a .grad the GEMM cannot write (a transposed view) takes the plain path") {
    w.set_grad(
        ops::transpose(ops::from_vector(std::vector<double>{1, 1, 1, 2, 2, 2}, {2, 3}), 0, 1));
    CHECK_FALSE(autograd::accumulable_grad(w, {3, 2}).defined());
    backward(sum(linear(x1, w)));
    CHECK(values(w.grad()) == std::vector<double>{5, 8, 5, 8, 5, 8});
  }
}

TEST_CASE("broadcast operands get gradients summed back to their shape", "[autograd]") {
  Tensor a = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = leaf({10, 20, 30}, {3});
  backward(sum(mul(a, b)));
  CHECK(values(a.grad()) == std::vector<double>{10, 20, 30, 10, 20, 30});
  CHECK(values(b.grad()) == std::vector<double>{5, 7, 9});  // column sums of a
}

TEST_CASE("a gradient shared by two leaves is copied, never aliased", "[autograd]") {
  Tensor a = leaf({1, 2}, {2});
  Tensor b = leaf({3, 4}, {2});
  backward(sum(add(a, b)));  // add's backward hands one tensor to both
  Tensor ga = a.grad();
  ops::mul_(ga, 10.0);  // what clip_grad_norm does
  CHECK(values(b.grad()) == std::vector<double>{1, 1});
}

TEST_CASE("retain_graph allows a second backward; without it the second throws", "[autograd]") {
  Tensor x = leaf({2}, {1});
  Tensor y = sum(exp(x));
  backward(y, {}, /*retain_graph=*/true);
  backward(y);
  CHECK(x.grad().item<double>() == Approx(2 * std::exp(2.0)));
  CHECK_THROWS_WITH(backward(y), Catch::Contains("second time"));
}

TEST_CASE("a 10,000-op chain runs backward and is freed without recursion", "[autograd]") {
  // On a thread with a 256 KiB stack: one frame per node (backward, or the
  // destructors of a chain of nodes) would need several MiB and crash.
  double grad = 0;
  run_on_small_stack([&] {
    Tensor x = leaf({1.0}, {1});
    Tensor y = x;
    for (int i = 0; i < 10000; ++i) y = mul(y, 1.0001);
    backward(sum(y), {}, /*retain_graph=*/true);
    grad = x.grad().item<double>();
    y = Tensor();  // drops the last handle to all 10,000 nodes
  });
  CHECK(grad == Approx(std::pow(1.0001, 10000)).epsilon(1e-9));
}

TEST_CASE("an in-place write to a saved tensor is a clear error", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  Tensor e = exp(x);  // exp saves its output
  Tensor loss = sum(e);
  ops::add_(e, 1.0);  // overwrite it
  CHECK_THROWS_WITH(backward(loss), Catch::Contains("exp") && Catch::Contains("modified in place"));
}

TEST_CASE("errors name the problem", "[autograd]") {
  Tensor c = ops::ones({2});
  CHECK_THROWS_WITH(backward(sum(c)), Catch::Contains("does not require grad"));
  Tensor x = leaf({1, 2}, {2});
  CHECK_THROWS_WITH(backward(mul(x, 2.0)), Catch::Contains("one-element"));
  CHECK_THROWS_WITH(mul(x, 2.0).requires_grad_(false), Catch::Contains("leaf"));
  CHECK_THROWS_WITH(register_post_accumulate_grad_hook(mul(x, 2.0), [](const Tensor&) {}),
                    Catch::Contains("not a leaf"));
}

TEST_CASE("hooks: tensor hooks may replace gradients; post-accumulate hooks see .grad",
          "[autograd][hooks]") {
  Tensor x = leaf({1, 2}, {2});
  Tensor h = mul(x, 3.0);
  std::vector<std::string> order;
  register_hook(h, [&](const Tensor& g) {
    order.push_back("h");
    return ops::mul(g, 2.0);  // doubles what flows on to x
  });
  register_hook(x, [&](const Tensor& g) {
    order.push_back("x");
    CHECK(values(g) == std::vector<double>{6, 6});
    return Tensor();
  });
  register_post_accumulate_grad_hook(x, [&](const Tensor& leaf) {
    order.push_back("x.post");
    CHECK(values(leaf.grad()) == std::vector<double>{6, 6});
  });
  backward(sum(h));
  CHECK(order == std::vector<std::string>{"h", "x", "x.post"});
}

TEST_CASE("post-accumulate hooks fire layer by layer, last layer first, during backward",
          "[autograd][hooks]") {
  // Three "layers" y = w3 * (w2 * (w1 * x)): each w's hook fires as soon as
  // its gradient is final, before the earlier layers' backward has run.
  Tensor x = ops::from_vector(std::vector<double>{1, 2}, {2});
  Tensor w1 = leaf({1, 1}, {2}), w2 = leaf({2, 2}, {2}), w3 = leaf({3, 3}, {2});
  std::vector<std::string> order;
  Tensor a1 = mul(w1, x);
  Tensor a2 = mul(w2, a1);
  register_hook(a1, [&](const Tensor&) {
    order.push_back("a1");
    return Tensor();
  });
  Tensor a3 = mul(w3, a2);
  for (auto [name, w] : {std::pair{"w1", w1}, std::pair{"w2", w2}, std::pair{"w3", w3}}) {
    register_post_accumulate_grad_hook(
        w, [&order, n = std::string(name)](const Tensor&) { order.push_back(n); });
  }
  backward(sum(a3));
  CHECK(order == std::vector<std::string>{"w3", "w2", "a1", "w1"});
}

TEST_CASE("queue_callback runs once at the end of the outermost backward", "[autograd][hooks]") {
  // Queued from a hook of the first leaf to finish, it runs after every
  // other hook; a nested backward (checkpointing's) does not run it early.
  Tensor w1 = leaf({1, 2}, {2}), w2 = leaf({3, 4}, {2});
  std::vector<std::string> order;
  register_post_accumulate_grad_hook(w2, [&](const Tensor&) {
    order.push_back("w2");
    autograd::queue_callback([&] { order.push_back("end"); });
  });
  register_post_accumulate_grad_hook(w1, [&](const Tensor&) { order.push_back("w1"); });
  Tensor h = autograd::checkpoint([&](const Tensor& a) { return mul(a, w2); }, mul(w1, w1));
  backward(sum(h));
  CHECK(order == std::vector<std::string>{"w2", "w1", "end"});
  CHECK_THROWS_WITH(autograd::queue_callback([] {}), Catch::Contains("no backward is running"));
}

namespace {
// y = x * s with a hand-written backward; counts its calls.
struct Scale : autograd::Function<Scale> {
  static constexpr const char* kName = "Scale";
  static inline int backward_calls = 0;
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x, double s) {
    CHECK_FALSE(autograd::grad_mode_enabled());  // forward records nothing
    ctx.set("s", s);
    ctx.save_for_backward({x});
    return ops::mul(x, s);
  }
  static autograd::TensorList backward(autograd::FunctionCtx& ctx,
                                       const autograd::TensorList& grads) {
    ++backward_calls;
    CHECK(ctx.needs_input_grad(0));
    CHECK(ctx.saved_tensors().size() == 1);
    return {ops::mul(grads[0], ctx.get<double>("s"))};
  }
};

struct WrongShape : autograd::Function<WrongShape> {
  static constexpr const char* kName = "WrongShape";
  static Tensor forward(autograd::FunctionCtx&, const Tensor& x) { return ops::clone(x); }
  static autograd::TensorList backward(autograd::FunctionCtx&, const autograd::TensorList&) {
    return {ops::ones({5})};
  }
};

// Returns its input itself (as an in-place collective would).
struct Identity : autograd::Function<Identity> {
  static Tensor forward(autograd::FunctionCtx&, const Tensor& x) { return x; }
  static autograd::TensorList backward(autograd::FunctionCtx&, const autograd::TensorList& g) {
    return {ops::mul(g[0], 2.0)};
  }
};
}  // namespace

TEST_CASE("custom Functions: forward and backward by hand", "[autograd][function]") {
  Tensor x = leaf({1, 2, 3}, {3});
  Scale::backward_calls = 0;
  Tensor y = Scale::apply(x, 5.0);
  CHECK(values(y) == std::vector<double>{5, 10, 15});
  backward(sum(mul(y, y)));  // d/dx (5x)^2 = 50 x
  CHECK(values(x.grad()) == std::vector<double>{50, 100, 150});
  CHECK(Scale::backward_calls == 1);

  Tensor z = WrongShape::apply(x);
  CHECK_THROWS_WITH(backward(sum(z)), Catch::Contains("WrongShape") && Catch::Contains("[5]"));

  Tensor w = leaf({1, 1}, {2});
  Tensor a = mul(w, 3.0);
  Tensor b = Identity::apply(a);  // same data as a, but its own history
  CHECK(grad_fn_name(a) == "mul");
  backward(sum(b));
  CHECK(values(w.grad()) == std::vector<double>{6, 6});

  NoGradGuard no_grad;
  CHECK_FALSE(Scale::apply(x, 2.0).requires_grad());
}

TEST_CASE("activation checkpointing recomputes the forward and gives the same gradients",
          "[autograd][checkpoint]") {
  Tensor w = leaf({0.5, -1.5, 2}, {3});
  auto block = [&](const Tensor& h) { return tanh(mul(exp(h), w)); };
  auto run = [&](bool use_checkpoint) {
    Tensor x = leaf({0.1, 0.2, 0.3}, {3});
    w.set_grad(Tensor());
    int calls = 0;
    auto counted = [&](const Tensor& h) {
      ++calls;
      return block(h);
    };
    Tensor y = use_checkpoint ? autograd::checkpoint(counted, x) : counted(x);
    CHECK(calls == 1);
    backward(sum(mul(y, y)));
    CHECK(calls == (use_checkpoint ? 2 : 1));  // rerun during backward
    return std::pair{values(x.grad()), values(w.grad())};
  };
  auto [gx_plain, gw_plain] = run(false);
  auto [gx_ckpt, gw_ckpt] = run(true);
  CHECK(gx_plain == gx_ckpt);
  CHECK(gw_plain == gw_ckpt);
}

TEST_CASE("checkpointing replays the forward's dropout mask", "[autograd][checkpoint]") {
  manual_seed(7);
  Tensor x = leaf(std::vector<double>(64, 1.0), {64});
  Tensor y = autograd::checkpoint([](const Tensor& h) { return dropout(h, 0.5, true); }, x);
  ops::rand({3});  // the generator moves on before backward
  backward(sum(y));
  // The gradient is the forward's mask scaled by 2: 2 where y kept, 0 where dropped.
  CHECK(values(x.grad()) == values(y));
}
