// Optimizers, schedules, clipping and the text dataset, against values
// worked out by hand or by an independent formula.
#include <catch2/catch.hpp>
#include <cmath>
#include <numbers>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/data/text_dataset.h"
#include "autograd/optim/adamw.h"
#include "autograd/optim/clip_grad.h"
#include "autograd/optim/lr_schedule.h"
#include "autograd/optim/sgd.h"
#include "tensor/ops.h"

using namespace spmd;

namespace {
Tensor param(std::vector<float> v) {
  Tensor t = ops::from_vector(v, {int64_t(v.size())});
  t.requires_grad_();
  return t;
}
void set_grad(Tensor& p, std::vector<float> g) {
  p.set_grad(ops::from_vector(g, {int64_t(g.size())}));
}
std::vector<double> values(const Tensor& t) { return ops::to_vector<double>(t); }
}  // namespace

TEST_CASE("SGD with momentum and weight decay follows torch.optim.SGD by hand", "[optim]") {
  Tensor p = param({1.0f, -2.0f});
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.5});
  set_grad(p, {1.0f, 1.0f});
  opt.step();  // g = 1 + 0.5 p = (1.5, 0); buf = g; p -= 0.1 buf
  CHECK(values(p)[0] == Approx(0.85));
  CHECK(values(p)[1] == Approx(-2.0));
  opt.step();  // g = 1 + 0.5 p = (1.425, 0); buf = 0.9 (1.5, 0) + g = (2.775, 0)
  CHECK(values(p)[0] == Approx(0.85 - 0.2775));
  CHECK(values(p)[1] == Approx(-2.0));
  opt.zero_grad();
  opt.step();  // no gradient: untouched
  CHECK(values(p)[0] == Approx(0.85 - 0.2775));
}

TEST_CASE("AdamW: the fused f32 step equals the composed formula and hand values", "[optim]") {
  // Step 1 by hand: m = 0.1 g, v = 0.001 g^2, m_hat = g, v_hat = g^2, so
  // p = p (1 - lr wd) - lr g / (|g| + eps).
  Tensor p = param({1.0f, -1.0f, 0.5f});
  optim::AdamW opt({p}, {.lr = 0.01, .weight_decay = 0.1});
  set_grad(p, {2.0f, -0.5f, 0.0f});
  opt.step();
  CHECK(values(p)[0] == Approx(1.0 * (1 - 0.001) - 0.01).epsilon(1e-6));
  CHECK(values(p)[1] == Approx(-1.0 * (1 - 0.001) + 0.01).epsilon(1e-6));
  CHECK(values(p)[2] == Approx(0.5 * (1 - 0.001)).epsilon(1e-6));

  // Several steps: the fused kernel (f32) against the composed ops (f64).
  Generator gen(1);
  Tensor a = ops::uniform({64}, -1, 1, {}, &gen);
  Tensor b = ops::to(a, DType::kF64);
  a.requires_grad_();
  b.requires_grad_();
  optim::AdamW fused({a}, {.lr = 0.05}), composed({b}, {.lr = 0.05});
  for (int step = 0; step < 5; ++step) {
    const Tensor g = ops::uniform({64}, -1, 1, {DType::kF64}, &gen);
    a.set_grad(ops::to(g, DType::kF32));
    b.set_grad(g);
    fused.step();
    composed.step();
  }
  CHECK(ops::allclose(ops::to(a, DType::kF64), b, 1e-5, 1e-6));
  const TensorMap state = fused.state_dict();
  CHECK(state.at("state.0.step").item<int64_t>() == 5);
}

TEST_CASE("warm-up then cosine decay", "[optim]") {
  optim::WarmupCosine lr(1.0, 10, 110, 0.1);
  CHECK(lr(0) == Approx(0.1));
  CHECK(lr(9) == Approx(1.0));
  CHECK(lr(10) == Approx(1.0));
  CHECK(lr(60) == Approx(0.55));  // halfway: (1 + cos(pi/2)) / 2 = 1/2
  CHECK(lr(110) == Approx(0.1));
  CHECK(lr(1000) == Approx(0.1));
  optim::WarmupCosine linear(1.0, 0, 100, 0.0, optim::WarmupCosine::Decay::kLinear);
  CHECK(linear(25) == Approx(0.75));
  CHECK_THROWS(optim::WarmupCosine(0.1, 10, 5));
}

TEST_CASE("clip_grad_norm_ scales to max_norm; a sharded reduce supplies the global norm",
          "[optim]") {
  Tensor a = param({0, 0}), b = param({0});
  set_grad(a, {3.0f, 0.0f});
  set_grad(b, {4.0f});
  CHECK(optim::clip_grad_norm_({a, b}, 1.0) == Approx(5.0));
  CHECK(values(a.grad())[0] == Approx(0.6).epsilon(1e-5));
  CHECK(values(b.grad())[0] == Approx(0.8).epsilon(1e-5));
  CHECK(optim::clip_grad_norm_({a, b}, 10.0) == Approx(1.0).epsilon(1e-5));  // below: untouched
  CHECK(values(b.grad())[0] == Approx(0.8).epsilon(1e-5));
  // Two "shards" holding (3) and (4): each sees its local 9 or 16; the
  // reduce (an all_reduce in parallel/) makes it 25 on both.
  Tensor s0 = param({0}), s1 = param({0});
  set_grad(s0, {3.0f});
  set_grad(s1, {4.0f});
  const double local0 = optim::local_grad_sq_sum({s0}), local1 = optim::local_grad_sq_sum({s1});
  auto all_reduce = [&](double) { return local0 + local1; };
  CHECK(optim::clip_grad_norm_({s0}, 1.0, all_reduce) == Approx(5.0));
  CHECK(optim::clip_grad_norm_({s1}, 1.0, all_reduce) == Approx(5.0));
  CHECK(values(s0.grad())[0] == Approx(0.6).epsilon(1e-5));
  CHECK(values(s1.grad())[0] == Approx(0.8).epsilon(1e-5));
}

TEST_CASE("byte tokenizer and text dataset windows", "[data]") {
  data::ByteTokenizer tok;
  const std::string text = "héllo";
  CHECK(tok.encode(text).size() == 6);  // é is two bytes
  CHECK(tok.decode(tok.encode(text)) == text);
  CHECK_THROWS_WITH(tok.decode({300}), Catch::Contains("300"));

  std::string abc;
  for (int i = 0; i < 100; ++i) abc.push_back(char('a' + i % 26));
  data::TextDataset ds(abc, 0.2);
  CHECK(ds.size(data::Split::kTrain) == 80);
  CHECK(ds.size(data::Split::kVal) == 20);
  Generator g1(9), g2(9);
  const data::Batch b1 = ds.sample(data::Split::kTrain, 4, 10, g1);
  const data::Batch b2 = ds.sample(data::Split::kTrain, 4, 10, g2);
  CHECK(b1.x.shape() == Shape{4, 10});
  CHECK(ops::allclose(b1.x, b2.x));  // same seed, same windows
  // y is x shifted by one: consecutive letters of the alphabet.
  const auto x = ops::to_vector<int64_t>(b1.x), y = ops::to_vector<int64_t>(b1.y);
  for (size_t i = 0; i < x.size(); ++i) CHECK((x[i] - 'a' + 1) % 26 == (y[i] - 'a') % 26);
  const auto eval = ds.eval_batches(data::Split::kVal, 1, 5, 100);
  CHECK(eval.size() == 3);  // 19 usable targets: 3 windows of 5
  CHECK_THROWS_WITH(ds.sample(data::Split::kVal, 1, 20, g1), Catch::Contains("T + 1"));
  CHECK_THROWS_WITH(data::TextDataset::from_file("/nonexistent/x.txt"),
                    Catch::Contains("/nonexistent/x.txt"));
}
