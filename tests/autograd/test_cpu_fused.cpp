// The fused kernels against the unfused compositions they replace: the CPU
// backend's bias + GELU (tensor/cpu/fused.cpp) against Backend's composed
// default (tensor/bias_gelu.cpp) and against gelu(add(u, b)) itself, forward
// and backward, f32 and f64, rows longer than a block and of odd lengths, on
// one and two threads; and a GPT-2 Transformer with fused_kernels on and off,
// whose loss and every gradient must agree. Registered once per CPU
// capability (tests/autograd/CMakeLists.txt).
#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "autograd/autograd.h"
#include "autograd/nn/transformer.h"
#include "tensor/backend.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;

namespace {

bool close(const Tensor& a, const Tensor& b, double tol) {
  return a.shape() == b.shape() && ops::allclose(a, b, tol, tol);
}

// The unfused reference, from the public ops: gelu(u + b), and its gradients.
ops::BiasGeluGrads composed_backward(const Tensor& dy, const Tensor& u, const Tensor& b,
                                     bool approximate) {
  const BinaryOp op = approximate ? BinaryOp::kGeluTanhBackward : BinaryOp::kGeluErfBackward;
  const Tensor du = ops::binary(op, dy, ops::add(u, b));
  std::vector<int> rows;
  for (int d = 0; d + 1 < u.ndim(); ++d) rows.push_back(d);
  return {du, ops::sum(du, rows)};
}

}  // namespace

TEST_CASE("fused bias + GELU equals add then GELU, forward and backward", "[cpu][fused]") {
  // (rows, C): C over one block (1024) and odd, C under a vector, a 3-d u.
  const Shape shapes[] = {{37, 1029}, {5, 3}, {2, 7, 96}, {1, 2048}};
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (DType dt : {DType::kF32, DType::kF64}) {
      for (bool approximate : {true, false}) {
        for (const Shape& shape : shapes) {
          INFO("shape " << shape << " " << dtype_name(dt) << " approximate " << approximate
                        << " threads " << threads);
          Generator gen(shape.numel());
          const Tensor u = ops::mul(ops::randn(shape, {dt}, &gen), 2.0);
          const Tensor b = ops::randn({shape[shape.ndim() - 1]}, {dt}, &gen);
          const Tensor dy = ops::randn(shape, {dt}, &gen);
          const double tol = dt == DType::kF64 ? 1e-12 : 1e-5;

          const Tensor y = ops::bias_gelu(u, b, approximate);
          CHECK(close(y, ops::gelu(ops::add(u, b), approximate), tol));
          Tensor y_default = ops::empty(shape, {dt});
          backend_for(Device::cpu()).Backend::bias_gelu(u, b, approximate, y_default);
          CHECK(close(y, y_default, tol));

          const ops::BiasGeluGrads g = ops::bias_gelu_backward(dy, u, b, approximate);
          const ops::BiasGeluGrads ref = composed_backward(dy, u, b, approximate);
          CHECK(close(g.du, ref.du, tol));
          CHECK(close(g.dbias, ref.dbias, tol));
          Tensor du = ops::empty(shape, {dt}), db = ops::empty(b.shape(), {dt});
          backend_for(Device::cpu()).Backend::bias_gelu_backward(dy, u, b, approximate, du, db);
          CHECK(close(g.du, du, tol));
          CHECK(close(g.dbias, db, tol));
        }
      }
    }
  }
  set_num_threads(1);
}

TEST_CASE("bias + GELU in bf16 is the f32 kernel rounded once; bad shapes are named",
          "[cpu][fused]") {
  const Tensor u = ops::to(ops::randn({37, 1029}), DType::kBF16);
  const Tensor b = ops::to(ops::randn({1029}), DType::kBF16);
  const Tensor dy = ops::to(ops::randn({37, 1029}), DType::kBF16);
  auto f32 = [](const Tensor& t) { return ops::to(t, DType::kF32); };
  auto bf16 = [](const Tensor& t) { return ops::to(t, DType::kBF16); };
  // Bitwise: the same f32 values through the same kernel, then one rounding.
  CHECK(ops::allclose(f32(ops::bias_gelu(u, b)), f32(bf16(ops::bias_gelu(f32(u), f32(b)))), 0, 0));
  const ops::BiasGeluGrads g = ops::bias_gelu_backward(dy, u, b);
  const ops::BiasGeluGrads w = ops::bias_gelu_backward(f32(dy), f32(u), f32(b));
  CHECK(g.du.dtype() == DType::kBF16);
  CHECK(ops::allclose(f32(g.du), f32(bf16(w.du)), 0, 0));
  CHECK(ops::allclose(f32(g.dbias), f32(bf16(w.dbias)), 0, 0));
  // Past one chunk of the half path (65,536 elements): du still bitwise, dbias
  // summed chunk by chunk in f32, so within f32 rounding.
  const Tensor ub = ops::to(ops::randn({300, 1029}), DType::kBF16);
  const Tensor dyb = ops::to(ops::randn({300, 1029}), DType::kBF16);
  const ops::BiasGeluGrads gb = ops::bias_gelu_backward(dyb, ub, b);
  const ops::BiasGeluGrads wb = ops::bias_gelu_backward(f32(dyb), f32(ub), f32(b));
  CHECK(
      ops::allclose(f32(ops::bias_gelu(ub, b)), f32(bf16(ops::bias_gelu(f32(ub), f32(b)))), 0, 0));
  CHECK(ops::allclose(f32(gb.du), f32(bf16(wb.du)), 0, 0));
  CHECK(ops::allclose(f32(gb.dbias), wb.dbias, 1e-2, 1e-2));  // bf16's rounding of dbias
  // And within bf16's rounding of the composition, add then GELU in bf16.
  CHECK(ops::allclose(f32(ops::bias_gelu(u, b)), f32(ops::gelu(ops::add(u, b))), 2e-2, 2e-2));
  CHECK_THROWS_WITH(ops::bias_gelu(ops::randn({4, 40}), ops::randn({39})),
                    Catch::Contains("bias_gelu") && Catch::Contains("39"));
  CHECK_THROWS_WITH(
      ops::bias_gelu_backward(ops::randn({4, 41}), ops::randn({4, 40}), ops::randn({40})),
      Catch::Contains("bias_gelu_backward"));
}

TEST_CASE("a GPT-2 Transformer gives the same loss and gradients fused and unfused",
          "[cpu][fused][nn]") {
  // T 13 of max 16: a sequence shorter than the model's, not a multiple of a block.
  nn::TransformerConfig config = nn::TransformerConfig::gpt2(61, 16, 2, 2, 24);
  Generator gen(3);
  const Tensor x = ops::randint(0, 61, {3, 13}, {DType::kI64}, &gen);
  const Tensor y = ops::randint(0, 61, {3, 13}, {DType::kI64}, &gen);
  std::map<std::string, Tensor> grads[2];
  double losses[2] = {0, 0};
  for (int fused = 0; fused < 2; ++fused) {
    config.fused_kernels = fused == 1;
    nn::Transformer model(config, 5);
    const Tensor loss = cross_entropy(model(x), y);
    backward(loss);
    losses[fused] = loss.item<double>();
    for (auto& [name, p] : model.named_parameters()) grads[fused][name] = ops::clone(p.grad());
  }
  CHECK(losses[1] == Approx(losses[0]).epsilon(1e-6));
  for (auto& [name, g] : grads[0]) {
    INFO(name);
    CHECK(close(grads[1][name], g, 1e-5));
  }
}

TEST_CASE("a hook on the MLP's first Linear keeps the unfused path, and runs", "[cpu][fused]") {
  nn::TransformerConfig config = nn::TransformerConfig::gpt2(32, 8, 1, 2, 16);
  nn::Transformer model(config, 1);
  auto block = std::dynamic_pointer_cast<nn::TransformerBlock>(model.layers->at(0));
  REQUIRE(block);
  int calls = 0;
  block->mlp->w1->register_forward_hook([&](nn::Module&, const Tensor&, Tensor&) { ++calls; });
  const Tensor ids = ops::randint(0, 32, {2, 8}, {DType::kI64});
  model(ids);
  CHECK(calls == 1);
}
