// nn::MoE on one process, the block expert parallelism distributes: its
// routing, gates, combination and capacity against a case worked by hand;
// its output against a plain per-token loop over the same weights; its
// gradients (the router's through the gates and the balancing loss)
// against finite differences; the balancing loss against hand-computed
// values; the Transformer that uses it; and the inputs it refuses.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "autograd/nn/moe.h"
#include "autograd/nn/transformer.h"
#include "tensor/ops.h"

using namespace spmd;

namespace {

// 3 tokens, C = 2, E = 4. The router's columns are logs, so the
// probabilities are exact fractions:
//   x0 = [1, 0]: p = [4, 2, 1, 1] / 8
//   x1 = [0, 1]: p = [1, 1, 2, 4] / 8
//   x2 = [1, 1]: p = [4, 2, 2, 4] / 12   (a tie between experts 0 and 3)
// Every expert ignores its input (w1 = w2 = 0) and returns its bias b2[e] =
// [e + 1, 10 (e + 1)], so the output is the gates' mix of those rows.
std::shared_ptr<nn::MoE> worked_moe(int64_t k, double capacity_factor) {
  nn::MoEOptions o{.d_model = 2,
                   .hidden = 3,
                   .n_experts = 4,
                   .top_k = k,
                   .bias = true,
                   .capacity_factor = capacity_factor};
  auto moe = std::make_shared<nn::MoE>(o);
  NoGradGuard no_grad;
  const double l1 = std::log(1.0), l2 = std::log(2.0), l4 = std::log(4.0);
  ops::copy_(moe->router->weight,
             ops::from_vector<double>({l4, l1, l2, l1, l1, l2, l1, l4}, {4, 2}));
  ops::zero_(moe->w1);
  ops::zero_(moe->w2);
  ops::copy_(moe->b2, ops::from_vector<double>({1, 10, 2, 20, 3, 30, 4, 40}, {4, 2}));
  return moe;
}
const Tensor kWorkedX = ops::from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2});

void check_rows(const Tensor& y, const std::vector<double>& want) {
  const std::vector<double> got = ops::to_vector<double>(y);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-6));
}

// --- A plain reference: each token alone, through loops on the host -------------------

double gelu_tanh(double z) {
  return 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
}

// y_n = sum over the top k of g (w2 gelu(w1 x_n + b1) + b2), or with SwiGLU's
// silu(w1 x_n + b1) * (w3 x_n + b3) for the gelu.
std::vector<double> per_token_reference(const nn::MoE& moe, const Tensor& x) {
  const auto& o = moe.options;
  const int64_t C = o.d_model, H = o.hidden, E = o.n_experts, N = x.numel() / C;
  const auto X = ops::to_vector<double>(x), R = ops::to_vector<double>(moe.router->weight);
  const auto W1 = ops::to_vector<double>(moe.w1), W2 = ops::to_vector<double>(moe.w2);
  const auto W3 = o.swiglu ? ops::to_vector<double>(moe.w3) : std::vector<double>();
  const auto B1 = ops::to_vector<double>(moe.b1), B2 = ops::to_vector<double>(moe.b2);
  const auto B3 = o.swiglu ? ops::to_vector<double>(moe.b3) : std::vector<double>();
  std::vector<double> y(size_t(N * C), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> p(static_cast<size_t>(E));
    double z = 0;
    for (int64_t e = 0; e < E; ++e) {
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += R[e * C + c] * X[n * C + c];
      z += (p[e] = std::exp(s));
    }
    std::vector<int64_t> top;  // the k largest, by repeated selection
    for (int64_t j = 0; j < o.top_k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e)
        if (std::find(top.begin(), top.end(), e) == top.end() && (best < 0 || p[e] > p[best]))
          best = e;
      top.push_back(best);
    }
    double gate_sum = 0;
    for (int64_t e : top) gate_sum += p[e];
    for (int64_t e : top) {
      const double g = o.top_k == 1 ? p[e] / z : p[e] / gate_sum;
      std::vector<double> h(static_cast<size_t>(H));
      for (int64_t i = 0; i < H; ++i) {
        double a = B1[e * H + i], b = o.swiglu ? B3[e * H + i] : 0;
        for (int64_t c = 0; c < C; ++c) {
          a += W1[(e * H + i) * C + c] * X[n * C + c];
          if (o.swiglu) b += W3[(e * H + i) * C + c] * X[n * C + c];
        }
        h[i] = o.swiglu ? a / (1 + std::exp(-a)) * b : gelu_tanh(a);
      }
      for (int64_t c = 0; c < C; ++c) {
        double out = B2[e * C + c];
        for (int64_t i = 0; i < H; ++i) out += W2[(e * C + c) * H + i] * h[i];
        y[n * C + c] += g * out;
      }
    }
  }
  return y;
}

}  // namespace

TEST_CASE("MoE routes, gates and combines a case worked by hand", "[moe]") {
  // k = 2: token 0 -> experts 0, 1 (gates 2/3, 1/3), token 1 -> 3, 2 (2/3,
  // 1/3), token 2 -> 0, 3 (1/2 each).
  auto top2 = worked_moe(2, 0);
  check_rows((*top2)(kWorkedX), {4.0 / 3, 40.0 / 3, 11.0 / 3, 110.0 / 3, 2.5, 25});
  CHECK(top2->stats().tokens_per_expert == std::vector<int64_t>{2, 1, 1, 2});
  CHECK(top2->stats().dropped == 0);
  // k = 1 keeps Switch's gate p: token 0 -> 0 (1/2), 1 -> 3 (1/2), 2 -> 0
  // (the tie goes to the lower index, gate 1/3).
  auto top1 = worked_moe(1, 0);
  check_rows((*top1)(kWorkedX), {0.5, 5, 2, 20, 1.0 / 3, 10.0 / 3});
  CHECK(top1->stats().tokens_per_expert == std::vector<int64_t>{2, 0, 0, 1});
}

TEST_CASE("MoE capacity drops the assignments past it, first choices first", "[moe]") {
  // capacity ceil(0.5 * 3 * 2 / 4) = 1. First choices in token order: 0 ->
  // e0, 1 -> e3, 2 -> e0 (full: dropped); second choices: 0 -> e1, 1 -> e2,
  // 2 -> e3 (full: dropped). Token 2 lost both, so it leaves as zeros (the
  // residual carries it); tokens 0 and 1 keep their gates.
  auto moe = worked_moe(2, 0.5);
  check_rows((*moe)(kWorkedX), {4.0 / 3, 40.0 / 3, 11.0 / 3, 110.0 / 3, 0, 0});
  CHECK(moe->stats().capacity == 1);
  CHECK(moe->stats().dropped == 2);
  CHECK(moe->stats().tokens_per_expert == std::vector<int64_t>{1, 1, 1, 1});
}

TEST_CASE("the balancing loss is E sum f_e P_e, worked by hand", "[moe]") {
  // P_e = the mean of the three tokens' p: [23, 13, 13, 23] / 72.
  // k = 2: f = [2, 1, 1, 2] / 6, aux = 4 (2*23 + 13 + 13 + 2*23) / 432 = 59/54.
  auto top2 = worked_moe(2, 0);
  (*top2)(kWorkedX);
  CHECK(top2->aux_loss().item<double>() == Approx(59.0 / 54).epsilon(1e-6));
  // k = 1: f = [2, 0, 0, 1] / 3, aux = 4 (2*23 + 23) / 216 = 23/18. Capacity
  // does not change f (it counts the router's choices).
  auto top1 = worked_moe(1, 0.5);
  (*top1)(kWorkedX);
  CHECK(top1->aux_loss().item<double>() == Approx(23.0 / 18).epsilon(1e-6));
  // A router that cannot tell experts apart (p = 1/E) gives exactly 1.
  NoGradGuard no_grad;
  ops::zero_(top1->router->weight);
  (*top1)(kWorkedX);
  CHECK(top1->aux_loss().item<double>() == Approx(1.0).epsilon(1e-12));
}

TEST_CASE("MoE matches a per-token loop over the same weights", "[moe]") {
  for (bool swiglu : {false, true}) {
    for (int64_t k : {1, 2, 3}) {
      Generator gen(5);
      nn::MoEOptions o{
          .d_model = 6, .hidden = 5, .n_experts = 4, .top_k = k, .swiglu = swiglu, .bias = true};
      nn::MoE moe(o, &gen);
      moe.to(DType::kF64);
      const Tensor x = ops::randn({2, 7, 6}, {DType::kF64}, &gen);
      const Tensor y = moe(x);
      CHECK(y.shape() == x.shape());
      const std::vector<double> got = ops::to_vector<double>(y), want = per_token_reference(moe, x);
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
      INFO("swiglu " << swiglu << " k " << k);
      CHECK(worst < 1e-12);
    }
  }
}

TEST_CASE("MoE's gradients, the router's included, match finite differences", "[moe][gradcheck]") {
  for (int64_t k : {1, 2}) {
    Generator gen(9);
    nn::MoEOptions o{.d_model = 4, .hidden = 3, .n_experts = 3, .top_k = k, .bias = true};
    nn::MoE moe(o, &gen);
    moe.to(DType::kF64);
    std::vector<Tensor> in = {ops::randn({5, 4}, {DType::kF64}, &gen),
                              moe.router->weight,
                              moe.w1,
                              moe.b1,
                              moe.w2,
                              moe.b2};
    for (Tensor& t : in) {
      t = ops::clone(t);
      t.requires_grad_();
    }
    // The output and the balancing loss together, so the router's gradient
    // through the gates and through P is checked at once.
    auto fn = [&](const std::vector<Tensor>& v) {
      moe.router->weight = v[1];
      moe.w1 = v[2];
      moe.b1 = v[3];
      moe.w2 = v[4];
      moe.b2 = v[5];
      const Tensor y = moe(v[0]);
      return cat({flatten(y), reshape(moe.aux_loss(), {1})}, 0);
    };
    const auto result = autograd::gradcheck(fn, in);
    INFO("k " << k << ": " << result.message);
    CHECK(result.ok);
  }
}

TEST_CASE("a Transformer with MoE blocks: every moe_every-th block, the aux loss summed", "[moe]") {
  auto c = nn::TransformerConfig::gpt2(/*V=*/32, /*T=*/6, /*layers=*/3, /*heads=*/2, /*C=*/16);
  c.n_experts = 4;
  c.moe_every = 2;
  nn::Transformer model(c, 3);
  const auto layers = nn::moe_layers(model);
  REQUIRE(layers.size() == 2);  // blocks 0 and 2; block 1 keeps its MLP
  CHECK(layers[0].first == "layers.0.moe");
  CHECK(layers[1].first == "layers.2.moe");
  const auto names = model.named_parameters();
  CHECK(std::any_of(names.begin(), names.end(),
                    [](const auto& p) { return p.first == "layers.1.mlp.w1.weight"; }));
  CHECK(std::any_of(names.begin(), names.end(),
                    [](const auto& p) { return p.first == "layers.2.moe.router.weight"; }));
  Generator gen(4);
  const Tensor ids = ops::randint(0, 32, {2, 6}, {DType::kI64}, &gen);
  const Tensor loss = cross_entropy(model(ids), ids);
  const Tensor aux = nn::moe_aux_loss(model);
  CHECK(aux.item<double>() == Approx(layers[0].second->aux_loss().item<double>() +
                                     layers[1].second->aux_loss().item<double>()));
  backward(add(loss, mul(aux, 0.01)));
  CHECK(model.submodule("layers.0.moe.router").parameters()[0].grad().defined());
}

TEST_CASE("MoE refuses top_k outside [1, n_experts] and inputs of the wrong width", "[moe]") {
  CHECK_THROWS_WITH(nn::MoE(nn::MoEOptions{.d_model = 4, .hidden = 4, .n_experts = 2, .top_k = 3}),
                    Catch::Contains("top_k 3 must be between 1 and n_experts (2)"));
  CHECK_THROWS_WITH(nn::MoE(nn::MoEOptions{.d_model = 4, .hidden = 4, .n_experts = 2, .top_k = 0}),
                    Catch::Contains("top_k 0"));
  nn::MoE moe(nn::MoEOptions{.d_model = 4, .hidden = 4, .n_experts = 2, .top_k = 1});
  CHECK_THROWS_WITH(moe(ops::zeros({3, 5})), Catch::Contains("expected (..., 4) input"));
}
