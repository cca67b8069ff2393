// The core property of expert parallelism: a Transformer whose MoE experts
// are split over ep ranks, each rank training on its share of the batch,
// trains exactly as one process with every expert local on the whole batch.
// k = 3 AdamW steps of cross-entropy + 0.01 aux, gradients clipped to a
// global norm (summed over the expert shards), give every step's loss and
// aux loss and every parameter (gathered with full_tensor) of the one-process
// run to 1e-5 relative in f32: ep = 2 and 4 (GPT-2 shape, top-2, every block
// MoE), ep = 2 (Llama shape, SwiGLU, top-1, every other block) and dp x ep =
// 2 x 2; the sharded checkpoint of the ep run loads into a plain model.
// Then: all_to_all_single returns every gradient row home; one MoE block
// whose router sends every token to rank 0's experts (the others receive
// zero rows) gives the one-process output and gradients; with a capacity
// factor each rank drops what the block alone drops on its tokens; bad
// layouts are refused before anything changes.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <optional>

#include "autograd/autograd.h"
#include "autograd/nn/moe.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "autograd/optim/clip_grad.h"
#include "ddp_test_util.h"
#include "harness.h"
#include "parallel/checkpoint/checkpoint.h"
#include "parallel/expert_parallel/expert_parallel.h"
#include "parallel/functional.h"
#include "parallel/placement.h"
#include "tensor/ops.h"
#include "tests/skip.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

constexpr int kSteps = 3;
constexpr int64_t kRowsPerRank = 2;  // sequences per rank per step
constexpr uint64_t kSeed = 17;
constexpr double kAuxCoef = 0.01;  // Switch's
constexpr double kMaxNorm = 0.5;   // small enough that every step clips

nn::TransformerConfig gpt2_moe() {
  auto c = nn::TransformerConfig::gpt2(/*V=*/64, /*T=*/8, /*layers=*/2, /*heads=*/4, /*C=*/32);
  c.n_experts = 4;
  c.moe_top_k = 2;
  return c;
}
nn::TransformerConfig llama_moe() {
  auto c = nn::TransformerConfig::llama(/*V=*/64, /*T=*/8, /*layers=*/2, /*heads=*/4, /*kv=*/2,
                                        /*C=*/32);
  c.n_experts = 4;
  c.moe_top_k = 1;
  c.moe_every = 2;  // block 0 MoE, block 1 dense
  return c;
}

struct Batch {
  Tensor x, y;  // (rows, T)
};
Batch batch(int step, int64_t rows, const nn::TransformerConfig& c, Device device) {
  Generator gen(4000 + uint64_t(step));
  return {
      ops::to(ops::randint(0, c.vocab_size, {rows, c.max_seq_len}, {DType::kI64}, &gen), device),
      ops::to(ops::randint(0, c.vocab_size, {rows, c.max_seq_len}, {DType::kI64}, &gen), device)};
}

optim::AdamWOptions adamw() { return {.lr = 3e-3, .eps = 1e-6, .weight_decay = 0.1}; }

struct Run {
  std::vector<double> losses, auxes, grad_norms;
  std::shared_ptr<nn::Transformer> model;
};

// One process, every expert local, the rows of all `ranks` at once.
Run train_reference(const nn::TransformerConfig& c, int ranks, Device device) {
  Run run{{}, {}, {}, std::make_shared<nn::Transformer>(c, kSeed)};
  run.model->to(device);
  optim::AdamW opt(run.model->parameters(), adamw());
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = batch(step, ranks * kRowsPerRank, c, device);
    const Tensor ce = cross_entropy((*run.model)(b.x), b.y);
    const Tensor aux = nn::moe_aux_loss(*run.model);
    const Tensor loss = add(ce, mul(aux, kAuxCoef));
    run.losses.push_back(loss.item<double>());
    run.auxes.push_back(aux.item<double>());
    opt.zero_grad();
    backward(loss);
    run.grad_norms.push_back(optim::clip_grad_norm_(run.model->parameters(), kMaxNorm));
    opt.step();
  }
  return run;
}

// dp x ep ranks, each on its own rows; the experts split over ep.
Run train_ep(ProcessGroup& world, const nn::TransformerConfig& c, int dp, Device device,
             const std::string& checkpoint_dir) {
  DeviceMesh mesh = dp > 1 ? DeviceMesh(borrow(world), {dp, world.size() / dp}, {"dp", "ep"})
                           : DeviceMesh(borrow(world), {world.size()}, {"ep"});
  Run run{{}, {}, {}, std::make_shared<nn::Transformer>(c, kSeed)};
  run.model->to(device);
  const ep::ExpertParallelism ep = ep::parallelize_experts(*run.model, mesh);
  const std::vector<Tensor> params = run.model->parameters();
  optim::AdamW opt(params, adamw());
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = batch(step, world.size() * kRowsPerRank, c, device);
    const int64_t first = ep.batch->rank() * kRowsPerRank;
    const Tensor logits = (*run.model)(ops::narrow(b.x, 0, first, kRowsPerRank));
    const Tensor ce = cross_entropy(logits, ops::narrow(b.y, 0, first, kRowsPerRank));
    const Tensor aux = nn::moe_aux_loss(*run.model);  // the batch's: the same on every rank
    const Tensor loss = add(ce, mul(aux, kAuxCoef));
    Tensor mean = ops::clone(loss);  // the reference's loss: the mean over the ranks
    ep.batch->wait(ep.batch->all_reduce(mean, ReduceOp::kAvg), OpType::kAllReduce);
    run.losses.push_back(mean.item<double>());
    run.auxes.push_back(aux.item<double>());
    opt.zero_grad();
    backward(loss);
    ep::sync_gradients(*run.model, ep);
    run.grad_norms.push_back(dist::clip_grad_norm_(params, kMaxNorm));
    opt.step();
  }
  if (!checkpoint_dir.empty()) save_sharded(run.model->state_dict(), checkpoint_dir, world);
  return run;
}

void check_close(double got, double want, const std::string& what) {
  expect(std::abs(got - want) <= 1e-5 * std::abs(want), what, ": ", got, " vs ", want);
}

void check_same(const Run& got, const Run& want, const std::string& what) {
  for (int s = 0; s < kSteps; ++s) {
    check_close(got.losses[s], want.losses[s], str_cat(what, ": step ", s, " loss"));
    check_close(got.auxes[s], want.auxes[s], str_cat(what, ": step ", s, " aux loss"));
    check_close(got.grad_norms[s], want.grad_norms[s], str_cat(what, ": step ", s, " grad norm"));
    expect(want.grad_norms[s] > kMaxNorm, what, ": step ", s, " did not clip");
  }
  const auto a = got.model->named_parameters(), b = want.model->named_parameters();
  expect(a.size() == b.size(), what, ": parameter counts differ");
  int sharded = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    expect(a[i].first == b[i].first, what, ": parameter ", a[i].first, " vs ", b[i].first);
    if (ep::is_expert_shard(a[i].second)) ++sharded;
    const Tensor whole = full_tensor(a[i].second);
    expect(whole.shape() == b[i].second.shape(), what, ": ", a[i].first, " gathers to ",
           whole.shape(), " not ", b[i].second.shape());
    const double rel = relative_difference(whole, b[i].second);
    expect(rel <= 1e-5, what, ": parameter ", a[i].first, " differs by ", rel, " (relative)");
  }
  expect(sharded > 0, what, ": no parameter is an expert shard");
}

// A plain model filled from the checkpoint equals the reference.
void check_checkpoint(const nn::TransformerConfig& c, const Run& want, const std::string& dir) {
  nn::Transformer plain(c, /*seed=*/999);
  load_sharded(plain.state_dict(), dir);
  for (const auto& [name, p] : want.model->named_parameters()) {
    const double rel = relative_difference(plain.parameter_slot(name), p);
    expect(rel <= 1e-5, "checkpoint: ", name, " differs by ", rel);
  }
}

void run_case(int world_size, int dp, const nn::TransformerConfig& c, const char* name,
              Device device = Device::cpu(), bool checkpoint = false) {
  const std::string dir = checkpoint ? (std::filesystem::temp_directory_path() /
                                        str_cat("spmd-ep-ckpt-", getpid(), "-", world_size))
                                           .string()
                                     : "";
  if (checkpoint) std::filesystem::remove_all(dir);
  run_world(
      world_size,
      [&](ProcessGroup& world) {
        const Run want = train_reference(c, world_size, device);
        const Run got = train_ep(world, c, dp, device, dir);
        check_same(got, want, str_cat(name, " (rank ", world.rank(), ")"));
        if (checkpoint) check_checkpoint(c, want, dir);
      },
      std::chrono::seconds(60));
  if (checkpoint) std::filesystem::remove_all(dir);
}

// --- One MoE block, outputs and gradients ----------------------------------------------

struct BlockResult {
  Tensor y, dx;                   // this rank's rows
  std::vector<Tensor> grads;      // router, w1, b1, w2, b2 (experts: this rank's rows)
  std::vector<int64_t> received;  // rows per (source, local expert)
};

nn::MoEOptions block_options(double capacity_factor = 0) {
  return {.d_model = 8,
          .hidden = 6,
          .n_experts = 4,
          .top_k = 2,
          .bias = true,
          .capacity_factor = capacity_factor};
}

// The block on `rows` rows from `first` of x; with a world, the experts split over it.
BlockResult run_block(ProcessGroup* world, bool zero_router, const Tensor& x_all, const Tensor& cot,
                      int64_t first, int64_t rows) {
  Generator gen(21);
  nn::MoE moe(block_options(), &gen);
  if (zero_router) ops::zero_(moe.router->weight);  // p = 1/E: every token picks experts 0, 1
  std::optional<DeviceMesh> mesh;
  ep::ExpertParallelism ep;
  if (world) {
    mesh.emplace(borrow(*world), std::vector<int64_t>{world->size()},
                 std::vector<std::string>{"ep"});
    ep = ep::parallelize_experts(moe, *mesh);
  }
  Tensor x = ops::clone(ops::narrow(x_all, 0, first, rows));
  x.requires_grad_();
  const Tensor y = moe(x);
  const Tensor c = ops::narrow(cot, 0, first, rows);
  backward(add(div(sum(mul(y, c)), double(rows)), mul(moe.aux_loss(), kAuxCoef)));
  if (world) ep::sync_gradients(moe, ep);
  BlockResult r{detach(y), x.grad(), {}, {}};
  for (const Tensor& p : {moe.router->weight, moe.w1, moe.b1, moe.w2, moe.b2})
    r.grads.push_back(p.grad());
  if (world) r.received = ep.dispatchers[0]->last().received;
  return r;
}

void check_tensor(const Tensor& got, const Tensor& want, const std::string& what) {
  const double rel = relative_difference(got, want);
  expect(rel <= 1e-5, what, " differs by ", rel, " (relative)");
}

}  // namespace

TEST_CASE("GPT-2 with MoE blocks under ep = 2 and 4 trains as one process", "[ep][equivalence]") {
  run_case(2, 1, gpt2_moe(), "GPT-2 MoE ep=2", Device::cpu(), /*checkpoint=*/true);
  run_case(4, 1, gpt2_moe(), "GPT-2 MoE ep=4");
}

TEST_CASE("Llama (SwiGLU experts, top-1, every other block) under ep = 2 trains as one process",
          "[ep][equivalence]") {
  run_case(2, 1, llama_moe(), "Llama MoE ep=2");
}

TEST_CASE("dp x ep = 2 x 2 trains as one process on all four shares", "[ep][dp][equivalence]") {
  run_case(4, 2, gpt2_moe(), "GPT-2 MoE dp=2 x ep=2");
}

TEST_CASE("all_to_all_single moves uneven rows and returns each gradient row home", "[ep]") {
  run_world(3, [](ProcessGroup& world) {
    const int r = world.rank(), n = world.size();
    // Rank r sends r + j rows to rank j, each row [100 r + j, i].
    std::vector<int64_t> in_sizes, out_sizes;
    std::vector<float> values;
    for (int j = 0; j < n; ++j) {
      in_sizes.push_back(r + j);
      out_sizes.push_back(j + r);  // rank j sends j + r rows to us
      for (int i = 0; i < r + j; ++i) values.insert(values.end(), {float(100 * r + j), float(i)});
    }
    Tensor x = ops::from_vector(values, {int64_t(values.size() / 2), 2});
    x.requires_grad_();
    const Tensor y = all_to_all_single(x, out_sizes, in_sizes, world);
    const std::vector<float> got = ops::to_vector<float>(y);
    size_t row = 0;
    for (int s = 0; s < n; ++s)
      for (int i = 0; i < s + r; ++i, ++row)
        expect(got[2 * row] == float(100 * s + r) && got[2 * row + 1] == float(i), "rank ", r,
               ": row ", row, " is ", got[2 * row], ", ", got[2 * row + 1]);
    backward(sum(mul(y, detach(y))));  // d/dy = y: each row's gradient is its own value
    expect(relative_difference(x.grad(), detach(x)) == 0, "rank ", r,
           ": the gradient rows did not come home");
  });
}

TEST_CASE("ranks that receive zero tokens: the one-process output and gradients", "[ep][uneven]") {
  for (bool zero_router : {true, false}) {
    for (int ranks : {2, 4}) {
      Generator gen(22);
      constexpr int64_t kRows = 5;  // per rank
      const Tensor x_all = ops::randn({ranks * kRows, 8}, {}, &gen);
      const Tensor cot = ops::randn({ranks * kRows, 8}, {}, &gen);
      run_world(ranks, [&](ProcessGroup& world) {
        const BlockResult want = run_block(nullptr, zero_router, x_all, cot, 0, ranks * kRows);
        const int64_t first = world.rank() * kRows, L = 4 / ranks;
        const BlockResult got = run_block(&world, zero_router, x_all, cot, first, kRows);
        const std::string what =
            str_cat("ep=", ranks, zero_router ? " zero router" : "", " rank ", world.rank(), ": ");
        check_tensor(got.y, ops::narrow(want.y, 0, first, kRows), what + "output");
        // Each rank's loss is its mean; the reference's the mean of those.
        check_tensor(ops::div(got.dx, double(ranks)), ops::narrow(want.dx, 0, first, kRows),
                     what + "input gradient");
        check_tensor(got.grads[0], want.grads[0], what + "router gradient");
        for (size_t i = 1; i < got.grads.size(); ++i)
          check_tensor(got.grads[i], ops::narrow(want.grads[i], 0, world.rank() * L, L),
                       str_cat(what, "expert gradient ", i));
        int64_t received = 0;
        for (int64_t n : got.received) received += n;
        // Every token picks experts 0 and 1, which live on ranks 0 (and 1 when ep = 4).
        if (zero_router && world.rank() >= 2 / L)
          expect(received == 0, what, "received ", received, " rows, expected none");
      });
    }
  }
}

TEST_CASE("with a capacity factor each rank drops what the block alone drops on its tokens",
          "[ep][capacity]") {
  Generator gen(23);
  const Tensor x_all = ops::randn({2 * 12, 8}, {}, &gen);
  run_world(2, [&](ProcessGroup& world) {
    const Tensor x = ops::narrow(x_all, 0, world.rank() * 12, 12);
    Generator g1(24), g2(24);
    nn::MoE local(block_options(/*capacity_factor=*/1.0), &g1), split(block_options(1.0), &g2);
    DeviceMesh mesh(borrow(world), {2}, {"ep"});
    ep::parallelize_experts(split, mesh);
    const Tensor want = local(x), got = split(x);
    const std::string what = str_cat("rank ", world.rank(), ": ");
    expect(local.stats().capacity == 6, what, "capacity ", local.stats().capacity);
    expect(got.shape() == want.shape() && relative_difference(got, want) <= 1e-6, what,
           "output differs");
    expect(split.stats().dropped == local.stats().dropped, what, "dropped ", split.stats().dropped,
           " vs ", local.stats().dropped);
    expect(split.stats().tokens_per_expert == local.stats().tokens_per_expert, what,
           "tokens per expert differ");
  });
}

TEST_CASE("expert parallel refuses layouts it cannot place, before changing anything",
          "[ep][errors]") {
  run_world(2, [](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2}, {"ep"});
    nn::MoE odd(nn::MoEOptions{.d_model = 4, .hidden = 4, .n_experts = 3, .top_k = 1});
    try {
      ep::parallelize_experts(odd, mesh);
      expect(false, "3 experts over 2 ranks were accepted");
    } catch (const InvalidArgument& e) {
      expect(std::string(e.what()).find("has 3 experts, which do not divide over 2 ep ranks") !=
                 std::string::npos,
             "unclear message: ", e.what());
    }
    expect(odd.w1.size(0) == 3, "the refused layer was changed");
    nn::MoE twice(nn::MoEOptions{.d_model = 4, .hidden = 4, .n_experts = 2, .top_k = 1});
    ep::parallelize_experts(twice, mesh);
    bool refused = false;
    try {
      ep::parallelize_experts(twice, mesh);
    } catch (const InvalidArgument& e) {
      refused = std::string(e.what()).find("split already") != std::string::npos;
    }
    expect(refused, "a second parallelize_experts was accepted");
    DeviceMesh tp(borrow(world), {2}, {"tp"});
    refused = false;
    try {
      nn::MoE m(nn::MoEOptions{.d_model = 4, .hidden = 4, .n_experts = 2, .top_k = 1});
      ep::parallelize_experts(m, tp);
    } catch (const InvalidArgument& e) {
      refused = std::string(e.what()).find("the axes {ep} or {dp, ep}") != std::string::npos;
    }
    expect(refused, "a mesh without an ep axis was accepted");
  });
  auto c = gpt2_moe();
  c.moe_top_k = 5;  // of 4 experts
  CHECK_THROWS_WITH(nn::Transformer(c, 0), Catch::Contains("top_k 5 must be between 1 and"));
}

// On a GPU: two ranks share it over the TCP backend, the reference on the same GPU.
TEST_CASE("ep = 2 on one GPU trains as one process on it", "[ep][gpu][equivalence]") {
  if (!have_gpu()) SPMD_SKIP_WITHOUT_GPU("no GPU: skipping");
  run_case(2, 1, gpt2_moe(), "GPT-2 MoE ep=2 on cuda", Device::cuda(0));
  run_case(2, 1, llama_moe(), "Llama MoE ep=2 on cuda", Device::cuda(0));
}
