// The differentiable collectives, each checked as a function of every
// rank's input: the backward on rank s must equal the finite-difference
// derivative of one global objective F with respect to rank s's input,
// where the perturbed forward runs for real across the ranks.
//
// F is sum_r <w_r, y_r> when each rank's output is its own term (partial),
// or <w, y> counted once when the output is the same on every rank
// (replicated: every rank holds the same w). An input that is replicated is
// perturbed on every rank at once, one that is per rank only on rank s.
// In f64, on 3 ranks (sizes that are not powers of two), with dims 0 and 1.
#include <catch2/catch.hpp>
#include <functional>

#include "autograd/autograd.h"
#include "harness.h"
#include "parallel/functional.h"
#include "tensor/ops.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

struct Case {
  const char* name;
  bool replicated_input;   // x is the same on every rank
  bool replicated_output;  // y is the same on every rank (F counts it once)
  Shape input;             // per-rank input shape (for 3 ranks)
  std::function<Tensor(const Tensor&, ProcessGroup&)> fn;
};

std::vector<Case> cases() {
  return {
      {"copy_to_group", true, false, {2, 3}, [](auto& x, auto& g) { return copy_to_group(x, g); }},
      {"reduce_from_group",
       false,
       true,
       {2, 3},
       [](auto& x, auto& g) { return reduce_from_group(x, g); }},
      {"all_gather dim 0",
       false,
       false,
       {2, 3},
       [](auto& x, auto& g) { return all_gather(x, 0, g); }},
      {"all_gather dim 1",
       false,
       false,
       {2, 2, 2},
       [](auto& x, auto& g) { return all_gather(x, 1, g); }},
      {"reduce_scatter dim 1",
       false,
       false,
       {2, 6},
       [](auto& x, auto& g) { return reduce_scatter(x, 1, g); }},
      {"reduce_scatter dim 0",
       false,
       false,
       {3, 2},
       [](auto& x, auto& g) { return reduce_scatter(x, 0, g); }},
      {"scatter_to_group dim -1",
       true,
       false,
       {2, 3},
       [](auto& x, auto& g) { return scatter_to_group(x, -1, g); }},
      {"gather_from_group dim 1",
       false,
       true,
       {2, 2},
       [](auto& x, auto& g) { return gather_from_group(x, 1, g); }},
      {"all_to_all 1 -> 0",
       false,
       false,
       {2, 3},
       [](auto& x, auto& g) { return all_to_all(x, 1, 0, g); }},
      {"all_to_all 0 -> 0",
       false,
       false,
       {3, 2},
       [](auto& x, auto& g) { return all_to_all(x, 0, 0, g); }},
  };
}

// Deterministic values for (rank, what), in f64.
Tensor values(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return ops::uniform(shape, -1, 1, {DType::kF64}, &gen);
}

// F for inputs x on this rank: its term, summed over ranks when partial.
double objective(const Case& c, const Tensor& x, ProcessGroup& g) {
  NoGradGuard no_grad;
  const Tensor y = c.fn(x, g);
  const Tensor w = values(y.shape(), 500 + (c.replicated_output ? 0 : g.rank()));
  Tensor term = ops::reshape(ops::sum(ops::mul(w, y)), {1});
  if (!c.replicated_output) g.all_reduce(term).wait();
  return term.item<double>();
}

}  // namespace

TEST_CASE("every differentiable collective's backward is the derivative of its forward",
          "[functional]") {
  run_world(3, [](ProcessGroup& g) {
    for (const Case& c : cases()) {
      const int r = g.rank();
      Tensor x = values(c.input, 100 + (c.replicated_input ? 0 : r));
      // Analytic: backward of F's local term.
      Tensor xg = ops::clone(x);
      xg.requires_grad_();
      const Tensor y = c.fn(xg, g);
      const Tensor w = values(y.shape(), 500 + (c.replicated_output ? 0 : r));
      backward(sum(mul(y, w)));
      // For a replicated input the backward already gives the whole dF/dx on
      // every rank (f sums the uses, split's backward gathers them).
      const Tensor grad = xg.grad();
      // Numeric: central differences through the real distributed forward.
      const double eps = 1e-6;
      for (int s = 0; s < g.size(); ++s) {
        if (c.replicated_input && s > 0) break;  // one perturbation moves every copy
        for (int64_t i = 0; i < x.numel(); ++i) {
          auto at = [&](double delta) {
            Tensor xp = ops::clone(x);
            if (c.replicated_input || r == s) {
              Tensor flat = ops::reshape(xp, {xp.numel()});
              Tensor one = ops::narrow(flat, 0, i, 1);
              ops::add_(one, delta);
            }
            return objective(c, xp, g);
          };
          const double numeric = (at(eps) - at(-eps)) / (2 * eps);
          if (r == s || c.replicated_input) {
            const double analytic = ops::to_vector<double>(grad)[i];
            expect(std::abs(numeric - analytic) < 1e-6, c.name, ": rank ", r, " element ", i,
                   " backward ", analytic, " vs finite difference ", numeric);
          }
        }
      }
    }
  });
}

TEST_CASE("sizes that do not divide by the group are refused before any communication",
          "[functional]") {
  run_world(2, [](ProcessGroup& g) {
    const Tensor x = ops::zeros({3, 5}, {DType::kF32});
    for (auto fn : {+[](const Tensor&t, ProcessGroup&pg) { return reduce_scatter(t, 1, pg); },
                    +[](const Tensor&t, ProcessGroup&pg) { return scatter_to_group(t, 0, pg); },
                    +[](const Tensor&t, ProcessGroup&pg) { return all_to_all(t, 1, 0, pg); }}) {
      bool threw = false;
      try {
        fn(x, g);
      } catch (const InvalidArgument& e) {
        threw = std::string(e.what()).find("does not divide by the 2 ranks") != std::string::npos;
      }
      expect(threw, "an indivisible size was not refused");
    }
    expect(g.stats().total_bytes() == 0, "something was communicated");
  });
}

TEST_CASE("the group counts calls and payload bytes per op", "[functional]") {
  run_world(2, [](ProcessGroup& g) {
    g.reset_stats();
    const Tensor x = ops::ones({4, 6}, {DType::kF32});  // 96 bytes
    all_gather(x, 1, g);                                // output 192 bytes
    reduce_scatter(x, 0, g);                            // input 96 bytes
    reduce_from_group(x, g);                            // 96 bytes
    const CommStats s = g.stats();
    expect(s[OpType::kAllGather].calls == 1 && s[OpType::kAllGather].bytes == 192, "all_gather");
    expect(s[OpType::kReduceScatter].calls == 1 && s[OpType::kReduceScatter].bytes == 96, "rs");
    expect(s[OpType::kAllReduce].calls == 1 && s[OpType::kAllReduce].bytes == 96, "all_reduce");
    expect(s.total_bytes() == 384, "total");
  });
}

TEST_CASE("a model cut in two over send/recv gets the gradients of the whole",
          "[functional][p2p]") {
  // y = tanh(x W1^T) W2^T, loss = sum(y * w): rank 0 holds W1, rank 1 W2.
  run_world(2, [](ProcessGroup& g) {
    const Tensor x = values({3, 4}, 1), w = values({3, 2}, 2);
    Tensor w1 = values({5, 4}, 3), w2 = values({2, 5}, 4);
    w1.requires_grad_();
    w2.requires_grad_();
    backward(sum(mul(linear(tanh(linear(x, w1)), w2), w)));  // the whole, on every rank
    const Tensor dw1 = ops::clone(w1.grad()), dw2 = ops::clone(w2.grad());
    w1.set_grad({});
    w2.set_grad({});
    if (g.rank() == 0) {
      const Tensor token = send(tanh(linear(x, w1)), 1, g);  // the activation forward
      backward(token);                                       // its gradient back
      expect(ops::allclose(w1.grad(), dw1, 1e-12, 1e-12), "dW1 across the cut");
    } else {
      const Tensor h = recv({3, 5}, DType::kF64, Device::cpu(), 0, g);
      backward(sum(mul(linear(h, w2), w)));  // sends dh back to rank 0
      expect(ops::allclose(w2.grad(), dw2, 1e-12, 1e-12), "dW2");
    }
  });
}
