// The core property of FSDP: a model sharded over N ranks, each training on
// its share of the batch, trains exactly as one process on the whole batch.
// k = 3 AdamW steps with the gradients clipped to a global norm (summed over
// the shards) give the loss of every step and every parameter (gathered with
// full_tensor) of the single-process run, to 1e-5 relative in f32: on N = 2,
// 3 (uneven shards: 64 and 32 rows over 3 ranks) and 4, with
// reshard_after_forward both ways and prefetch both ways, for GPT-2 (tied
// head in the root) and Llama, under HSDP 2 x 2 and FSDP x TP 2 x 2 (with
// sequence parallelism), and
// with gradient accumulation (set_requires_gradient_sync(false) on all but
// the last microbatch, or on all and reduce_gradients() on every unit after
// the last: then each unit reduces once per step, full batch or HSDP).
#include <catch2/catch.hpp>

#include "autograd/autograd.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "autograd/optim/clip_grad.h"
#include "ddp_test_util.h"
#include "harness.h"
#include "parallel/device_mesh.h"
#include "parallel/fsdp/fully_shard.h"
#include "parallel/placement.h"
#include "parallel/tensor_parallel/loss.h"
#include "parallel/tensor_parallel/plan.h"
#include "tensor/ops.h"
#include "tests/skip.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

constexpr int kSteps = 3;
constexpr int64_t kRowsPerRank = 2;  // sequences per dp rank per step
constexpr uint64_t kSeed = 13;
constexpr double kMaxNorm = 0.5;  // small enough that every step clips

nn::TransformerConfig gpt2_config() {
  return nn::TransformerConfig::gpt2(/*V=*/64, /*T=*/8, /*layers=*/3, /*heads=*/4, /*C=*/32);
}
nn::TransformerConfig llama_config() {
  return nn::TransformerConfig::llama(/*V=*/64, /*T=*/8, /*layers=*/2, /*heads=*/4, /*kv=*/2,
                                      /*C=*/32);
}

struct Batch {
  Tensor x, y;
};
Batch batch(int step, int64_t rows, const nn::TransformerConfig& c, Device device) {
  Generator gen(3000 + uint64_t(step));
  return {
      ops::to(ops::randint(0, c.vocab_size, {rows, c.max_seq_len}, {DType::kI64}, &gen), device),
      ops::to(ops::randint(0, c.vocab_size, {rows, c.max_seq_len}, {DType::kI64}, &gen), device)};
}

// GPT-2's key bias has an exactly zero gradient, so what reaches it is the
// rounding noise of either summation order; AdamW divides it by its own
// magnitude. An eps of 1e-4 keeps such steps below 1e-7 of the learning rate
// while every real gradient (1e-3 and up) still moves its parameter.
optim::AdamWOptions adamw() { return {.lr = 3e-3, .eps = 1e-4, .weight_decay = 0.1}; }

struct Run {
  std::vector<double> losses, grad_norms;
  std::shared_ptr<nn::Transformer> model;
};

Run train_reference(const nn::TransformerConfig& c, int dp, Device device) {
  Run run{{}, {}, std::make_shared<nn::Transformer>(c, kSeed)};
  run.model->to(device);
  optim::AdamW opt(run.model->parameters(), adamw());
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = batch(step, dp * kRowsPerRank, c, device);
    const Tensor loss = cross_entropy((*run.model)(b.x), b.y);
    run.losses.push_back(loss.item<double>());
    opt.zero_grad();
    backward(loss);
    run.grad_norms.push_back(optim::clip_grad_norm_(run.model->parameters(), kMaxNorm));
    opt.step();
  }
  return run;
}

struct Layout {
  int replicate = 1, shard = 2, tp = 1;
  FsdpOptions options;
  int microbatches = 1;  // > 1: gradient accumulation, sync on the last only
  bool reduce_after = false;  // sync on none; reduce_gradients() after the last
  bool sp = false;       // sequence parallel, with tp
};

// Each dp rank (replicate x shard) trains on its rows; tp ranks share them.
Run train_fsdp(ProcessGroup& world, const nn::TransformerConfig& c, const Layout& l,
               Device device) {
  DeviceMesh mesh(borrow(world), {l.replicate, l.shard, l.tp}, {"dp_replicate", "dp_shard", "tp"});
  Run run{{}, {}, std::make_shared<nn::Transformer>(c, kSeed)};
  run.model->to(device);
  if (l.tp > 1) tp::parallelize_transformer(*run.model, mesh["tp"], l.sp);
  FsdpOptions o = l.options;
  o.shard_axis = "dp_shard";
  if (l.replicate > 1) o.replicate_axis = "dp_replicate";
  for (size_t i = 0; i < run.model->layers->size(); ++i) fully_shard(run.model->layers->at(i), mesh, o);
  const auto root = fully_shard(run.model, mesh, o);
  optim::AdamW opt(run.model->parameters(), adamw());
  DeviceMesh dp = mesh.flatten({"dp_replicate", "dp_shard"}, "dp");
  const int dp_size = l.replicate * l.shard;
  const int64_t first_row = dp.coordinate()[0] * kRowsPerRank;
  const int64_t mb_rows = kRowsPerRank / l.microbatches;
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = batch(step, dp_size * kRowsPerRank, c, device);
    opt.zero_grad();
    double loss_sum = 0;
    for (int m = 0; m < l.microbatches; ++m) {
      root->set_requires_gradient_sync(!l.reduce_after && m == l.microbatches - 1);
      const Tensor x = ops::narrow(b.x, 0, first_row + m * mb_rows, mb_rows);
      const Tensor y = ops::narrow(b.y, 0, first_row + m * mb_rows, mb_rows);
      const Tensor logits = (*run.model)(x);
      Tensor loss = l.tp > 1 ? tp::vocab_parallel_cross_entropy(logits, y, mesh.group("tp"))
                             : cross_entropy(logits, y);
      if (l.microbatches > 1) loss = div(loss, double(l.microbatches));  // autograd's
      Tensor mean = ops::clone(loss);
      if (dp_size > 1) dp.group("dp").all_reduce(mean, ReduceOp::kAvg).wait();
      loss_sum += mean.item<double>();
      backward(loss);
    }
    if (l.reduce_after) {
      for (FsdpModule* u : root->units()) u->reduce_gradients();
      for (const FsdpUnitTimes& u : root->timeline())
        expect(u.reduces.size() == 1, "unit ", u.unit, " reduced ", u.reduces.size(),
               " times in step ", step);
    }
    run.losses.push_back(loss_sum);
    run.grad_norms.push_back(dist::clip_grad_norm_(run.model->parameters(), kMaxNorm));
    opt.step();
  }
  return run;
}

void check_same(const Run& got, const Run& want, const std::string& what) {
  for (int s = 0; s < kSteps; ++s) {
    const double rel = std::abs(got.losses[s] - want.losses[s]) / std::abs(want.losses[s]);
    expect(rel <= 1e-5, what, ": step ", s, " loss ", got.losses[s], " vs ", want.losses[s]);
    const double norm_rel = std::abs(got.grad_norms[s] - want.grad_norms[s]) / want.grad_norms[s];
    expect(norm_rel <= 1e-5 && want.grad_norms[s] > kMaxNorm, what, ": step ", s,
           " gradient norm ", got.grad_norms[s], " vs ", want.grad_norms[s]);
  }
  const auto a = got.model->named_parameters(), b = want.model->named_parameters();
  expect(a.size() == b.size(), what, ": parameter counts differ");
  for (size_t i = 0; i < a.size(); ++i) {
    expect(a[i].first == b[i].first, what, ": parameter ", i, " is ", a[i].first);
    const LayoutMeta* layout = placements_of(a[i].second);
    expect(layout != nullptr, what, ": ", a[i].first, " carries no placement");
    const Tensor whole = full_tensor(a[i].second);
    expect(whole.shape() == b[i].second.shape(), what, ": ", a[i].first, " gathers to ",
           whole.shape(), " not ", b[i].second.shape());
    const double rel = relative_difference(whole, b[i].second);
    expect(rel <= 1e-5, what, ": parameter ", a[i].first, " differs by ", rel, " (relative)");
  }
}

void run_case(const nn::TransformerConfig& c, const Layout& l, const std::string& name,
              Device device = Device::cpu()) {
  const int world_size = l.replicate * l.shard * l.tp;
  run_world(
      world_size,
      [&](ProcessGroup& world) {
        const Run want = train_reference(c, l.replicate * l.shard, device);
        const Run got = train_fsdp(world, c, l, device);
        check_same(got, want, str_cat(name, " (rank ", world.rank(), ")"));
      },
      std::chrono::seconds(60));
}

Layout fsdp(int n, bool reshard = true, bool prefetch = true) {
  Layout l;
  l.shard = n;
  l.options.reshard_after_forward = reshard;
  l.options.prefetch = prefetch;
  return l;
}

}  // namespace

TEST_CASE("FSDP on N = 2, 3 (uneven) and 4 trains as one process", "[fsdp][equivalence]") {
  run_case(gpt2_config(), fsdp(2), "GPT-2 FSDP N=2");
  run_case(gpt2_config(), fsdp(3), "GPT-2 FSDP N=3 (uneven shards)");
  run_case(llama_config(), fsdp(4), "Llama FSDP N=4");
}

TEST_CASE("FSDP with reshard_after_forward and prefetch off trains the same",
          "[fsdp][equivalence]") {
  run_case(gpt2_config(), fsdp(2, /*reshard=*/false), "GPT-2 FSDP N=2, kept after forward");
  run_case(llama_config(), fsdp(3, true, /*prefetch=*/false), "Llama FSDP N=3, no prefetch");
}

TEST_CASE("HSDP 2 x 2 and FSDP x TP 2 x 2 train as one process", "[fsdp][hsdp][tp][equivalence]") {
  Layout hsdp = fsdp(2);
  hsdp.replicate = 2;
  run_case(gpt2_config(), hsdp, "GPT-2 HSDP 2 x 2");
  Layout with_tp = fsdp(2);
  with_tp.tp = 2;
  run_case(gpt2_config(), with_tp, "GPT-2 FSDP 2 x TP 2");
  with_tp.sp = true;
  run_case(llama_config(), with_tp, "Llama FSDP 2 x TP 2 + SP");
}

TEST_CASE("gradient accumulation without sync gives the full-batch step", "[fsdp][equivalence]") {
  Layout l = fsdp(2);
  l.microbatches = 2;
  run_case(gpt2_config(), l, "GPT-2 FSDP N=2, 2 microbatches");
  l.reduce_after = true;
  run_case(gpt2_config(), l, "GPT-2 FSDP N=2, 2 microbatches, reduce_gradients after");
  l.replicate = 2;
  run_case(llama_config(), l, "Llama HSDP 2 x 2, 2 microbatches, reduce_gradients after");
}

TEST_CASE("FSDP on one GPU trains as one process on it", "[fsdp][gpu][equivalence]") {
  if (!have_gpu()) SPMD_SKIP_WITHOUT_GPU("no GPU: skipping");
  run_case(gpt2_config(), fsdp(2), "GPT-2 FSDP N=2 on cuda", Device::cuda(0));
  Layout with_tp = fsdp(2);
  with_tp.tp = 2;
  run_case(llama_config(), with_tp, "Llama FSDP 2 x TP 2 on cuda", Device::cuda(0));
}
