// Context parallelism against the unsplit computation: ring attention
// equals full causal attention, forward and backward (dQ, dK, dV), for
// cp = 2, 3, 4 (and grouped-query heads), to 1e-10 in f64 and 1e-5 in f32;
// every rank computes the same number of blocks; a sequence that does not
// divide is refused; and a model trained k = 3 AdamW steps under cp = 2 and
// dp x cp = 2 x 2 gives the single process's loss and parameters to 1e-5.
#include <catch2/catch.hpp>

#include "autograd/autograd.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "ddp_test_util.h"
#include "harness.h"
#include "parallel/context_parallel/context_parallel.h"
#include "parallel/context_parallel/ring_attention.h"
#include "parallel/ddp/ddp.h"
#include "parallel/device_mesh.h"
#include "tensor/ops.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

Tensor leaf(const Tensor& t) {
  Tensor x = ops::contiguous(t);
  x.requires_grad_();
  return x;
}

void check_ring(int cp, DType dtype, int64_t Hkv, double tol) {
  run_world(cp, [&](ProcessGroup& world) {
    const int64_t B = 2, H = 4, c = 3, T = 2 * cp * c, D = 8;
    Generator gen(7);
    const ops::TensorOptions o{dtype};
    const Tensor q = ops::randn({B, H, T, D}, o, &gen), k = ops::randn({B, Hkv, T, D}, o, &gen),
                 v = ops::randn({B, Hkv, T, D}, o, &gen), g = ops::randn({B, H, T, D}, o, &gen);
    // The whole sequence in one process.
    const Tensor qf = leaf(q), kf = leaf(k), vf = leaf(v);
    const Tensor want = scaled_dot_product_attention(qf, kf, vf, /*causal=*/true);
    backward(want, g);
    // This rank's chunks through the ring.
    auto mine = [&](const Tensor& t) { return cp::shard_sequence(t, 2, world); };
    const Tensor ql = leaf(mine(q)), kl = leaf(mine(k)), vl = leaf(mine(v));
    const int64_t blocks_before = cp::ring_attention_blocks();
    const Tensor got = cp::ring_attention(ql, kl, vl, world);
    const int64_t blocks = cp::ring_attention_blocks() - blocks_before;
    backward(got, mine(g));
    const std::string what =
        str_cat("cp=", cp, " ", dtype_name(dtype), " Hkv=", Hkv, " rank ", world.rank());
    expect(blocks == 2 * cp + 1, what, ": computed ", blocks, " blocks, not 2 cp + 1");
    const std::pair<const char*, std::pair<Tensor, Tensor>> pairs[] = {
        {"out", {got, mine(detach(want))}},
        {"dq", {ql.grad(), mine(qf.grad())}},
        {"dk", {kl.grad(), mine(kf.grad())}},
        {"dv", {vl.grad(), mine(vf.grad())}}};
    for (const auto& [name, p] : pairs) {
      const double rel = relative_difference(p.first, p.second);
      expect(rel <= tol, what, ": ", name, " differs by ", rel, " (relative)");
    }
  });
}

constexpr int kSteps = 3;

// GPT-2's shape (learned positions), or Llama's (RoPE, grouped-query heads).
nn::TransformerConfig config(bool llama = false) {
  if (llama) return nn::TransformerConfig::llama(64, 16, 2, 4, 2, 32);
  return nn::TransformerConfig::gpt2(/*V=*/64, /*T=*/16, /*layers=*/2, /*heads=*/4, /*C=*/32);
}

std::vector<Tensor> batch(int step, int64_t rows) {
  Generator gen(500 + uint64_t(step));
  return {ops::randint(0, 64, {rows, 16}, {DType::kI64}, &gen),
          ops::randint(0, 64, {rows, 16}, {DType::kI64}, &gen)};
}

optim::AdamWOptions adamw() { return {.lr = 3e-3, .eps = 1e-4, .weight_decay = 0.1}; }

struct Run {
  std::vector<double> losses;
  std::shared_ptr<nn::Transformer> model;
};

Run train_reference(int64_t rows, bool llama) {
  Run run{{}, std::make_shared<nn::Transformer>(config(llama), 5)};
  optim::AdamW opt(run.model->parameters(), adamw());
  for (int s = 0; s < kSteps; ++s) {
    const auto b = batch(s, rows);
    const Tensor loss = cross_entropy((*run.model)(b[0]), b[1]);
    run.losses.push_back(loss.item<double>());
    opt.zero_grad();
    backward(loss);
    opt.step();
  }
  return run;
}

// dp x cp ranks: a dp replica's rows, the sequence split over cp.
Run train_cp(ProcessGroup& world, int dp, bool llama) {
  DeviceMesh mesh(borrow(world), {dp, world.size() / dp}, {"dp", "cp"});
  DeviceMesh both = mesh.flatten({"dp", "cp"}, "dp_cp");
  Run run{{}, std::make_shared<nn::Transformer>(config(llama), 5)};
  cp::parallelize_context(*run.model, mesh.group_ptr("cp"));
  DistributedDataParallel ddp(run.model, both.group_ptr("dp_cp"));  // gradients: mean over dp x cp
  optim::AdamW opt(ddp.parameters(), adamw());
  const int64_t rows = 2, first = mesh.coordinate("dp") * rows;
  for (int s = 0; s < kSteps; ++s) {
    const auto b = batch(s, dp * rows);
    const Tensor x = cp::shard_sequence(ops::narrow(b[0], 0, first, rows), 1, mesh.group("cp"));
    const Tensor y = cp::shard_sequence(ops::narrow(b[1], 0, first, rows), 1, mesh.group("cp"));
    const Tensor loss = cross_entropy(ddp(x), y);
    Tensor mean = ops::clone(detach(loss));
    both.group("dp_cp").wait(both.group("dp_cp").all_reduce(mean, ReduceOp::kAvg),
                             OpType::kAllReduce);
    run.losses.push_back(mean.item<double>());
    opt.zero_grad();
    backward(loss);
    opt.step();
  }
  return run;
}

void check_training(int world_size, int dp, const std::string& name, bool llama = false) {
  run_world(
      world_size,
      [&](ProcessGroup& world) {
        const Run want = train_reference(2 * dp, llama), got = train_cp(world, dp, llama);
        for (int s = 0; s < kSteps; ++s) {
          const double rel = std::abs(got.losses[s] - want.losses[s]) / want.losses[s];
          expect(rel <= 1e-5, name, ": step ", s, " loss ", got.losses[s], " vs ", want.losses[s]);
        }
        const auto a = got.model->named_parameters(), b = want.model->named_parameters();
        for (size_t i = 0; i < a.size(); ++i) {
          const double rel = relative_difference(a[i].second, b[i].second);
          expect(rel <= 1e-5, name, ": ", a[i].first, " differs by ", rel);
        }
      },
      std::chrono::seconds(60));
}

}  // namespace

TEST_CASE("ring attention is causal attention, forward and backward", "[cp][ring]") {
  for (int cp : {1, 2, 3, 4}) check_ring(cp, DType::kF64, 4, 1e-10);
  check_ring(2, DType::kF32, 4, 1e-5);
  check_ring(3, DType::kF64, 2, 1e-10);  // grouped-query: 2 key/value heads for 4 query heads
}

TEST_CASE("a sequence that does not split into 2 cp chunks is refused", "[cp][errors]") {
  run_world(2, [](ProcessGroup& world) {
    bool refused = false;
    try {
      cp::shard_sequence(ops::zeros({1, 6}), 1, world);
    } catch (const Error& e) {
      refused = std::string(e.what()).find("6 tokens does not divide into 2 x cp = 4 chunks") !=
                std::string::npos;
    }
    expect(refused, "a 6-token sequence over cp = 2 was not refused by its numbers");
  });
}

TEST_CASE("cp = 2 and dp x cp = 2 x 2 train as one process", "[cp][equivalence]") {
  check_training(2, 1, "cp=2");
  check_training(4, 2, "dp=2 x cp=2");
}

TEST_CASE("rotary positions under cp: each chunk rotated by its global positions",
          "[cp][rope][equivalence]") {
  check_training(2, 1, "llama (RoPE, GQA), cp=2", /*llama=*/true);
  check_training(4, 1, "llama (RoPE, GQA), cp=4", /*llama=*/true);
}
