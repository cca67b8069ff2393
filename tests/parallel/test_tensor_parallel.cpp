// Tensor parallelism piece by piece: the chapter's linear layer split
// column-wise and row-wise against the unsplit layer (outputs and every
// gradient), the vocab-parallel cross-entropy against the full one without
// a (N, V) tensor on any rank, placements and the blocks they describe, the
// bytes the Transformer plan moves against the formula, and the errors for
// plans that cannot apply, raised before any communication.
#include <catch2/catch.hpp>

#include "autograd/autograd.h"
#include "autograd/nn/layers.h"
#include "autograd/nn/transformer.h"
#include "ddp_test_util.h"
#include "harness.h"
#include "parallel/device_mesh.h"
#include "parallel/placement.h"
#include "parallel/tensor_parallel/loss.h"
#include "parallel/tensor_parallel/plan.h"
#include "tensor/cpu/allocator.h"
#include "tensor/ops.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

// x (B, in) and the unsplit layer's results for the loss sum(w * layer(x)).
struct Reference {
  Tensor x, y, dx, dweight, dbias;
};
Reference unsplit(nn::Linear& layer, const Tensor& x0, const Tensor& w) {
  Tensor x = ops::clone(x0);
  x.requires_grad_();
  const Tensor y = layer(x);
  backward(sum(mul(y, w)));
  return {x, y, x.grad(), layer.weight.grad(), layer.bias.grad()};
}

void check_close(const Tensor& got, const Tensor& want, const std::string& what) {
  expect(got.shape() == want.shape(), what, ": shape ", got.shape(), " vs ", want.shape());
  const double rel = relative_difference(got, want);
  expect(rel <= 1e-5, what, ": differs by ", rel);
}

}  // namespace

TEST_CASE("a linear layer split column-wise, then row-wise, equals the unsplit layer", "[tp]") {
  run_world(2, [](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2}, {"tp"});
    Generator gen(3);
    const Tensor x = ops::randn({4, 6}, {}, &gen), w = ops::randn({4, 8}, {}, &gen);
    for (bool colwise : {true, false}) {
      nn::Linear whole(6, 8, true, nullptr), split(6, 8, true, nullptr);
      ops::copy_(split.weight, whole.weight);
      ops::copy_(split.bias, whole.bias);
      const Reference want = unsplit(whole, x, w);
      // Column-wise: each rank computes 4 of the 8 outputs (gathered here);
      // row-wise: each rank multiplies 3 of the 6 inputs, partial sums reduced.
      if (colwise) {
        tp::ColwiseParallel({.output = tp::Layout::kReplicate}).apply(split, "fc", mesh);
      } else {
        tp::RowwiseParallel({.input = tp::Layout::kReplicate}).apply(split, "fc", mesh);
      }
      Tensor xs = ops::clone(x);
      xs.requires_grad_();
      const Tensor y = split(xs);
      backward(sum(mul(y, w)));
      const std::string what = colwise ? "column-wise" : "row-wise";
      check_close(y, want.y, what + " output");
      check_close(xs.grad(), want.dx, what + " input gradient");
      check_close(full_tensor(split.weight), whole.weight, what + " weight");
      // The shard's gradient is the matching slice of the whole gradient.
      const int dim = colwise ? 0 : 1;
      const int64_t n = split.weight.size(dim);
      check_close(split.weight.grad(), ops::narrow(want.dweight, dim, world.rank() * n, n),
                  what + " weight gradient");
      const Tensor want_dbias =
          colwise ? ops::narrow(want.dbias, 0, world.rank() * 4, 4) : want.dbias;
      check_close(split.bias.grad(), want_dbias, what + " bias gradient");
      expect(split.bias.defined(), what, ": the bias was not given back");
    }
  });
}

TEST_CASE("vocab-parallel cross-entropy equals the full one, without (N, V) on any rank",
          "[tp][loss]") {
  for (int tp_size : {2, 4}) {
    run_world(tp_size, [](ProcessGroup& g) {
      const int64_t B = 4, T = 8, V = 4096, Vl = V / g.size();
      Generator gen(5);
      const Tensor logits = ops::mul(ops::randn({B, T, V}, {}, &gen), 3.0);
      Tensor targets = ops::randint(0, V, {B, T}, {DType::kI64}, &gen);
      Tensor ignored = ops::select(ops::select(targets, 0, 1), 0, 2);
      ops::fill_(ignored, -100);  // one row that counts for nothing
      Tensor whole = ops::clone(logits);
      whole.requires_grad_();
      const Tensor want = cross_entropy(whole, targets);
      backward(want);

      Tensor mine = ops::contiguous(ops::narrow(logits, 2, g.rank() * Vl, Vl));
      mine.requires_grad_();
      const size_t before = cpu::host_memory_stats().allocated;
      const Tensor got = tp::vocab_parallel_cross_entropy(mine, targets, g);
      backward(got);
      const size_t peak = cpu::host_memory_stats().peak_allocated;
      expect(std::abs(got.item<double>() - want.item<double>()) <= 1e-5 * want.item<double>(),
             "loss ", got.item<double>(), " vs ", want.item<double>());
      check_close(mine.grad(), ops::narrow(whole.grad(), 2, g.rank() * Vl, Vl), "logit gradient");
      // Everything the loss and its backward held at once, on top of what
      // existed before, is less than one (N, V) f32 tensor.
      const size_t full_logits = size_t(B * T * V) * 4;
      expect(peak - before < full_logits, "the loss held ", peak - before,
             " bytes at its peak, a full (N, V) is ", full_logits);
    });
  }
}

TEST_CASE("placements give each rank its block of the global tensor", "[tp][placement]") {
  // A fused (3 x 4, 2) qkv-like weight of segments 4, 2, 2 over 2 ranks: rank 1
  // holds rows 2-3 of q, 5 of k, 7 of v.
  CHECK(local_shape({8, 2}, {Placement::shard(0, {4, 2, 2})}, {2}, {1}, "t") == Shape{4, 2});
  CHECK(local_shape({6, 4}, {Placement::shard(1)}, {2}, {0}, "t") == Shape{6, 2});
  CHECK(local_shape({6, 4}, {Placement::replicate()}, {2}, {1}, "t") == Shape{6, 4});
  // Uneven, as torch.chunk: 5 rows over 4 ranks are 2, 2, 1, 0.
  const int64_t want_rows[4] = {2, 2, 1, 0};
  for (int64_t c = 0; c < 4; ++c) {
    CHECK(local_shape({5, 3}, {Placement::shard(0)}, {4}, {c}, "t") == Shape{want_rows[c], 3});
    CHECK(chunk_bounds(5, 4, c).offset == std::min<int64_t>(2 * c, 5));
  }
  CHECK_THROWS_WITH(local_shape({8, 2}, {Placement::shard(0, {4, 3, 1})}, {2}, {0}, "w"),
                    Catch::Contains("segment 3"));
  // On a real 2-rank mesh: rank r's blocks.
  run_world(2, [](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2}, {"tp"});
    const LayoutMeta layout{mesh, {Placement::shard(0, {4, 2, 2})}, Shape{8, 2}, nullptr};
    const auto blocks = local_blocks(layout, mesh.coordinate());
    const int r = world.rank();
    const int64_t want_global[3] = {2 * r, 4 + r, 6 + r}, want_local[3] = {0, 2, 3};
    for (int i = 0; i < 3; ++i) {
      expect(blocks[i].global_offset[0] == want_global[i] &&
                 blocks[i].local_offset[0] == want_local[i] &&
                 blocks[i].size[0] == (i == 0 ? 2 : 1),
             "block ", i, " of rank ", r);
    }
  });
}

TEST_CASE("the Transformer plan moves exactly the bytes of the formula", "[tp][volume]") {
  run_world(2, [](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2}, {"tp"});
    const int64_t B = 2, T = 8;
    for (bool llama : {false, true}) {
      for (bool sp : {false, true}) {
        const auto c = llama ? nn::TransformerConfig::llama(64, T, 2, 4, 2, 32)
                             : nn::TransformerConfig::gpt2(64, T, 2, 4, 32);
        nn::Transformer model(c, 1);
        tp::parallelize_transformer(model, mesh, sp);
        Generator gen(9);
        const Tensor ids = ops::randint(0, 64, {B, T}, {DType::kI64}, &gen);
        mesh.group("tp").reset_stats();
        backward(tp::vocab_parallel_cross_entropy(model(ids), ids, mesh.group("tp")));
        const CommStats s = mesh.group("tp").stats();
        const tp::TpCommVolume want = tp::transformer_tp_comm_per_step(c, B, T, sp);
        const std::string what = str_cat(llama ? "Llama" : "GPT-2", sp ? " + SP" : "");
        auto check = [&](OpType op, const CommStats::Count& w, const char* name) {
          expect(s[op].calls == w.calls && s[op].bytes == w.bytes, what, ": ", name, " ",
                 s[op].calls, " calls / ", s[op].bytes, " bytes, the formula says ", w.calls, " / ",
                 w.bytes);
        };
        check(OpType::kAllReduce, want.all_reduce, "all_reduce");
        check(OpType::kAllGather, want.all_gather, "all_gather");
        check(OpType::kReduceScatter, want.reduce_scatter, "reduce_scatter");
      }
    }
  });
}

TEST_CASE("plans that cannot apply are refused, naming the size, before any communication",
          "[tp][errors]") {
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  auto c = nn::TransformerConfig::llama(64, 8, 2, 6, 2, 48);  // 6 heads, 2 kv heads
  CHECK_THAT(message([&] { tp::transformer_plan(c, 4, false); }),
             Catch::Contains("attention heads (6) does not divide by tp = 4"));
  CHECK_THAT(message([&] { tp::transformer_plan(c, 3, false); }),
             Catch::Contains("key/value heads (2) does not divide by tp = 3"));
  auto v = nn::TransformerConfig::gpt2(66, 8, 2, 4, 32);
  CHECK_THAT(message([&] { tp::transformer_plan(v, 4, false); }),
             Catch::Contains("vocabulary (66) does not divide by tp = 4"));
  auto f = nn::TransformerConfig::gpt2(64, 8, 2, 4, 32);
  f.ffn_hidden = 90;
  CHECK_THAT(message([&] { tp::transformer_plan(f, 4, false); }),
             Catch::Contains("FFN width (90) does not divide by tp = 4"));

  run_world(2, [&](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2}, {"tp"});
    world.reset_stats();
    nn::Transformer model(nn::TransformerConfig::gpt2(64, 8, 2, 4, 32), 1);
    const std::string none = message([&] {
      tp::parallelize_module(model, mesh,
                             {{"layers.*.attn.wq", std::make_shared<tp::ColwiseParallel>()}});
    });
    expect(
        none.find("\"layers.*.attn.wq\" (ColwiseParallel) matches no module") != std::string::npos,
        "unmatched pattern: ", none);
    const std::string type = message([&] {
      tp::parallelize_module(model, mesh,
                             {{"layers.*.attn_norm", std::make_shared<tp::RowwiseParallel>()}});
    });
    expect(type.find("\"layers.0.attn_norm\" is a LayerNorm, not a Linear") != std::string::npos,
           "wrong module type: ", type);
    expect(mesh.group("tp").stats().total_bytes() == 0 && world.stats().total_bytes() == 0,
           "a refused plan communicated");
  });
}
