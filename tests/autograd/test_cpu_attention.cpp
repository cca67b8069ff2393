// The CPU backend's fused attention (tensor/cpu/attention.cpp, which the
// differentiable scaled_dot_product_attention runs on) against the composed
// default of Backend (tensor/attention.cpp) at lengths that span several of
// its query blocks, causal and not, T != S, grouped-query, strided heads,
// forward and backward, in f32 and f64; bitwise repeatable; and its outputs
// laid out heads side by side.
#include <catch2/catch.hpp>

#include "tensor/attention.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

using namespace spmd;

namespace {

struct Case {
  int64_t B, H, Hkv, T, S, D;
  bool causal;
};

// q, k, v as (B, H, T, D) views of (B, T, H, D) tensors, as a model makes them.
Tensor heads(const Shape& bthd, DType dt, Generator& gen) {
  return ops::transpose(ops::randn(bthd, {dt}, &gen), 1, 2);
}

}  // namespace

TEST_CASE("fused CPU attention equals the composed default, forward and backward", "[cpu]") {
  const Case cases[] = {{2, 4, 4, 70, 70, 16, true},  // three query blocks, the last partial
                        {1, 4, 2, 64, 64, 8, true},   // grouped-query, exact blocks
                        {1, 2, 1, 40, 75, 8, false},  // T != S
                        {1, 2, 2, 75, 40, 8, true}};  // causal with T > S
  for (DType dt : {DType::kF32, DType::kF64}) {
    for (const Case& c : cases) {
      INFO("B " << c.B << " H " << c.H << " Hkv " << c.Hkv << " T " << c.T << " S " << c.S
                << " causal " << c.causal << " " << dtype_name(dt));
      Generator gen(c.T * 7 + c.S);
      const Tensor q = heads({c.B, c.T, c.H, c.D}, dt, gen);
      const Tensor k = heads({c.B, c.S, c.Hkv, c.D}, dt, gen);
      const Tensor v = heads({c.B, c.S, c.Hkv, c.D}, dt, gen);
      const Tensor dout = ops::randn({c.B, c.H, c.T, c.D}, {dt}, &gen);
      const double scale = 0.3;
      Backend& cpu = backend_for(Device::cpu());

      const ops::AttentionResult fused = ops::attention(q, k, v, c.causal, scale);
      Tensor out = ops::empty(q.shape(), {dt}), lse = ops::empty({c.B, c.H, c.T});
      cpu.Backend::attention(q, k, v, c.causal, scale, out, lse);  // the composed default
      const double tol = dt == DType::kF64 ? 1e-12 : 1e-5;
      CHECK(ops::allclose(fused.out, out, tol, tol));
      CHECK(ops::allclose(fused.lse, lse, 1e-5, 1e-5));

      const ops::AttentionGrads g = ops::attention_backward(dout, q, k, v, fused, c.causal, scale);
      Tensor dq = ops::empty(q.shape(), {dt}), dk = ops::empty(k.shape(), {dt});
      Tensor dv = ops::empty(v.shape(), {dt});
      cpu.Backend::attention_backward(dout, q, k, v, out, lse, c.causal, scale, dq, dk, dv);
      CHECK(ops::allclose(g.dq, dq, tol, tol));
      CHECK(ops::allclose(g.dk, dk, tol, tol));
      CHECK(ops::allclose(g.dv, dv, tol, tol));

      // Heads side by side: (B, T, H, D) underneath, so merging them copies nothing.
      CHECK(ops::transpose(fused.out, 1, 2).is_contiguous());
      CHECK(ops::transpose(g.dq, 1, 2).is_contiguous());
      CHECK(ops::transpose(g.dk, 1, 2).is_contiguous());

      // Bitwise the same on a second call (scratch of another address).
      std::vector<Tensor> keep(7, ops::ones({7, 3}));  // move the allocator along
      const ops::AttentionResult again = ops::attention(q, k, v, c.causal, scale);
      CHECK(ops::allclose(again.out, fused.out, 0, 0));
      const ops::AttentionGrads g2 = ops::attention_backward(dout, q, k, v, fused, c.causal, scale);
      CHECK(ops::allclose(g2.dq, g.dq, 0, 0));
      CHECK(ops::allclose(g2.dk, g.dk, 0, 0));
    }
  }
}

TEST_CASE("bf16 attention is the f32 kernel on widened inputs, each output rounded once", "[cpu]") {
  Generator gen(11);
  const Tensor q = heads({2, 70, 4, 16}, DType::kBF16, gen);
  const Tensor k = heads({2, 70, 2, 16}, DType::kBF16, gen);
  const Tensor v = heads({2, 70, 2, 16}, DType::kBF16, gen);
  const Tensor dout = ops::randn({2, 4, 70, 16}, {DType::kBF16}, &gen);
  auto f32 = [](const Tensor& t) { return ops::to(t, DType::kF32); };
  auto bf16 = [](const Tensor& t) { return ops::to(t, DType::kBF16); };
  const ops::AttentionResult r = ops::attention(q, k, v, true, 0.25);
  const ops::AttentionResult w = ops::attention(f32(q), f32(k), f32(v), true, 0.25);
  CHECK(r.out.dtype() == DType::kBF16);
  CHECK(ops::allclose(f32(r.out), f32(bf16(w.out)), 0, 0));
  CHECK(ops::allclose(r.lse, w.lse, 0, 0));
  const ops::AttentionGrads g = ops::attention_backward(dout, q, k, v, r, true, 0.25);
  // The f32 backward from the same (rounded) out the bf16 one saw.
  ops::AttentionResult w_rounded{f32(r.out), r.lse};
  const ops::AttentionGrads wg =
      ops::attention_backward(f32(dout), f32(q), f32(k), f32(v), w_rounded, true, 0.25);
  CHECK(ops::allclose(f32(g.dq), f32(bf16(wg.dq)), 0, 0));
  CHECK(ops::allclose(f32(g.dk), f32(bf16(wg.dk)), 0, 0));
  CHECK(ops::allclose(f32(g.dv), f32(bf16(wg.dv)), 0, 0));
}
