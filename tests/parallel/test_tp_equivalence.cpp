// The core property of tensor parallelism: the model split over tp ranks
// trains exactly as the unsplit model does. The same model, data and seed,
// trained k = 3 steps with AdamW, gives the loss of every step and every
// parameter (gathered with full_tensor) of one process, to 1e-5 relative in
// f32, for the GPT-2 shape (fused qkv, learned positions, tied head, biases)
// and the Llama shape (RMSNorm, SwiGLU, RoPE, grouped-query attention,
// untied head), with the gradients clipped to a global norm every step (the
// norm summed over shards), under tp = 2 and 4, with sequence parallelism (and dropout,
// whose masks must match the unsplit model's), and on a dp x tp = 2 x 2 mesh
// with DDP over dp, whose reference trains on both replicas' batches at once.
#include <catch2/catch.hpp>

#include "autograd/autograd.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "autograd/optim/clip_grad.h"
#include "ddp_test_util.h"
#include "harness.h"
#include "parallel/ddp/ddp.h"
#include "parallel/device_mesh.h"
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
constexpr int64_t kRowsPerReplica = 2;  // sequences per dp replica per step
constexpr uint64_t kSeed = 11;

nn::TransformerConfig gpt2_config(double dropout) {
  auto c = nn::TransformerConfig::gpt2(/*V=*/64, /*T=*/8, /*layers=*/2, /*heads=*/4, /*C=*/32);
  c.dropout = dropout;
  return c;
}

nn::TransformerConfig llama_config() {
  // 8 query heads sharing 4 key/value heads (GQA), head size 4; FFN 128.
  return nn::TransformerConfig::llama(/*V=*/64, /*T=*/8, /*layers=*/2, /*heads=*/8, /*kv=*/4,
                                      /*C=*/32);
}

struct Batch {
  Tensor x, y;  // (rows, T)
};
Batch batch(int step, int64_t rows, const nn::TransformerConfig& c, Device device) {
  Generator gen(2000 + uint64_t(step));
  return {
      ops::to(ops::randint(0, c.vocab_size, {rows, c.max_seq_len}, {DType::kI64}, &gen), device),
      ops::to(ops::randint(0, c.vocab_size, {rows, c.max_seq_len}, {DType::kI64}, &gen), device)};
}

// GPT-2's key bias has an exactly zero gradient (softmax ignores what a bias
// adds to all of a query's scores alike), so what reaches it is rounding
// noise of either summation order, which AdamW would turn into steps of up
// to lr * g / (|g| + eps); near-zero gradients of the norms' biases do the
// same. With eps 1e-5 both stay below the tolerance under every OpenBLAS
// core (with 1e-6, the AVX-512 cores' summation order put layer 0's
// attn_norm.bias 1.1e-5 apart).
optim::AdamWOptions adamw() { return {.lr = 3e-3, .eps = 1e-5, .weight_decay = 0.1}; }

// Gradients are clipped to a global norm this small, so every step clips:
// the sharded norm (dist::clip_grad_norm_) must be the unsplit one.
constexpr double kMaxNorm = 0.5;

struct Run {
  std::vector<double> losses, grad_norms;
  std::shared_ptr<nn::Transformer> model;
};

// One process, the batches of every dp replica at once.
Run train_reference(const nn::TransformerConfig& c, int dp, Device device) {
  manual_seed(kSeed);  // dropout draws from the default generator
  Run run{{}, {}, std::make_shared<nn::Transformer>(c, kSeed)};
  run.model->to(device);
  optim::AdamW opt(run.model->parameters(), adamw());
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = batch(step, dp * kRowsPerReplica, c, device);
    const Tensor loss = cross_entropy((*run.model)(b.x), b.y);
    run.losses.push_back(loss.item<double>());
    opt.zero_grad();
    backward(loss);
    run.grad_norms.push_back(optim::clip_grad_norm_(run.model->parameters(), kMaxNorm));
    opt.step();
  }
  return run;
}

// dp x tp ranks: each dp replica trains on its rows, split over tp.
Run train_parallel(ProcessGroup& world, const nn::TransformerConfig& c, int dp, bool sp,
                   Device device) {
  DeviceMesh mesh(borrow(world), {dp, world.size() / dp}, {"dp", "tp"});
  manual_seed(kSeed);
  Run run{{}, {}, std::make_shared<nn::Transformer>(c, kSeed)};
  run.model->to(device);
  tp::parallelize_transformer(*run.model, mesh["tp"], sp);
  std::shared_ptr<DistributedDataParallel> ddp;
  if (dp > 1) ddp = std::make_shared<DistributedDataParallel>(run.model, mesh.group_ptr("dp"));
  optim::AdamW opt(run.model->parameters(), adamw());
  const int64_t first_row = mesh.coordinate("dp") * kRowsPerReplica;
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = batch(step, dp * kRowsPerReplica, c, device);
    const Tensor x = ops::narrow(b.x, 0, first_row, kRowsPerReplica);
    const Tensor y = ops::narrow(b.y, 0, first_row, kRowsPerReplica);
    const Tensor logits = ddp ? (*ddp)(x) : (*run.model)(x);  // (b, T, V/tp)
    Tensor loss = tp::vocab_parallel_cross_entropy(logits, y, mesh.group("tp"));
    // The reference's loss is the mean over every replica's rows.
    Tensor mean = ops::clone(loss);
    if (dp > 1) mesh.group("dp").all_reduce(mean, ReduceOp::kAvg).wait();
    run.losses.push_back(mean.item<double>());
    opt.zero_grad();
    backward(loss);
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
    expect(norm_rel <= 1e-5 && want.grad_norms[s] > kMaxNorm, what, ": step ", s, " gradient norm ",
           got.grad_norms[s], " vs ", want.grad_norms[s]);
  }
  const auto a = got.model->named_parameters(), b = want.model->named_parameters();
  expect(a.size() == b.size(), what, ": parameter counts differ");
  int sharded = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    expect(a[i].first == b[i].first, what, ": parameter ", i, " is ", a[i].first, " vs ",
           b[i].first);
    if (placements_of(a[i].second)) ++sharded;
    const Tensor whole = full_tensor(a[i].second);
    expect(whole.shape() == b[i].second.shape(), what, ": ", a[i].first, " gathers to ",
           whole.shape(), " not ", b[i].second.shape());
    const double rel = relative_difference(whole, b[i].second);
    expect(rel <= 1e-5, what, ": parameter ", a[i].first, " differs by ", rel, " (relative)");
  }
  expect(sharded > 0, what, ": no parameter carries a placement");
}

void run_case(int world_size, int dp, const nn::TransformerConfig& c, bool sp, const char* name,
              Device device = Device::cpu()) {
  run_world(world_size, [&](ProcessGroup& world) {
    const Run want = train_reference(c, dp, device);
    const Run got = train_parallel(world, c, dp, sp, device);
    check_same(got, want, str_cat(name, " (rank ", world.rank(), ")"));
  });
}

}  // namespace

TEST_CASE("GPT-2 under tp = 2 and 4 trains as one process", "[tp][equivalence]") {
  run_case(2, 1, gpt2_config(0), false, "GPT-2 tp=2");
  run_case(4, 1, gpt2_config(0), false, "GPT-2 tp=4");
}

TEST_CASE("Llama (GQA, SwiGLU, RoPE) under tp = 2 and 4 trains as one process",
          "[tp][equivalence]") {
  run_case(2, 1, llama_config(), false, "Llama tp=2");
  run_case(4, 1, llama_config(), false, "Llama tp=4");
}

TEST_CASE("sequence parallel, with dropout, trains as one process", "[tp][sp][equivalence]") {
  run_case(2, 1, gpt2_config(0.1), true, "GPT-2 tp=2 + SP, dropout 0.1");
  run_case(4, 1, gpt2_config(0), true, "GPT-2 tp=4 + SP");
  run_case(2, 1, llama_config(), true, "Llama tp=2 + SP");
}

TEST_CASE("dp x tp = 2 x 2 (DDP over dp) trains as one process on both batches",
          "[tp][dp][equivalence]") {
  run_case(4, 2, gpt2_config(0), false, "GPT-2 dp=2 x tp=2");
  run_case(4, 2, llama_config(), true, "Llama dp=2 x tp=2 + SP");
}

// On a GPU: two ranks share it over the TCP backend (NCCL refuses two ranks
// on one device), the reference runs on the same GPU.
TEST_CASE("tp = 2 on one GPU trains as one process on it", "[tp][gpu][equivalence]") {
  if (!have_gpu()) SPMD_SKIP_WITHOUT_GPU("no GPU: skipping");
  run_case(2, 1, gpt2_config(0), false, "GPT-2 tp=2 on cuda", Device::cuda(0));
  run_case(2, 1, llama_config(), true, "Llama tp=2 + SP on cuda", Device::cuda(0));
}
