// The balancing loss under gradient accumulation: ep = 2 ranks, each
// backward one accumulation chunk (rank r's chunk k is row 2k + r of the
// batch, as DataLoader deals rows), give every gradient of one process that
// accumulates over the same 2 chunks (rows 0-1, then 2-3) to f32 rounding:
// each chunk's f and P are the batch's, summed over the ranks. One process
// over the whole batch in one chunk is a different objective (the loss is a
// product of two means over the tokens, not linear in them): the router's
// gradient then differs by percents, which the case also checks, so a run
// compared against it cannot pass by rounding. Without the balancing loss
// the three agree.
#include <catch2/catch.hpp>

#include "autograd/autograd.h"
#include "autograd/nn/moe.h"
#include "autograd/nn/transformer.h"
#include "ddp_test_util.h"
#include "harness.h"
#include "parallel/expert_parallel/expert_parallel.h"
#include "tensor/ops.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

constexpr int64_t kRows = 4, kChunks = 2;

nn::TransformerConfig config() {
  auto c = nn::TransformerConfig::gpt2(/*V=*/64, /*T=*/8, /*layers=*/1, /*heads=*/4, /*C=*/32);
  c.n_experts = 4;
  c.moe_top_k = 2;
  return c;
}

struct Batch {
  Tensor x, y;  // (kRows, T)
};
Batch batch(const nn::TransformerConfig& c) {
  Generator gen(4000);
  Tensor x = ops::randint(0, c.vocab_size, {kRows, c.max_seq_len}, {DType::kI64}, &gen);
  return {x, ops::randint(0, c.vocab_size, {kRows, c.max_seq_len}, {DType::kI64}, &gen)};
}

// One chunk's backward: (cross-entropy + coef x aux) / chunks.
void chunk_backward(nn::Transformer& m, const Tensor& x, const Tensor& y, double coef,
                    int64_t chunks) {
  const Tensor ce = cross_entropy(m(x), y);  // the forward first: it routes
  backward(div(add(ce, mul(nn::moe_aux_loss(m), coef)), double(chunks)));
}

// One process: every expert, the batch in `chunks` consecutive chunks.
std::vector<Tensor> single_grads(double coef, int64_t chunks) {
  const nn::TransformerConfig c = config();
  nn::Transformer m(c, /*seed=*/17);
  const Batch b = batch(c);
  const int64_t rows = kRows / chunks;
  for (int64_t k = 0; k < chunks; ++k)
    chunk_backward(m, ops::narrow(b.x, 0, k * rows, rows), ops::narrow(b.y, 0, k * rows, rows),
                   coef, chunks);
  std::vector<Tensor> grads;
  for (const Tensor& p : m.parameters()) grads.push_back(ops::clone(p.grad()));
  return grads;
}

void check(double coef) {
  const std::vector<Tensor> same = single_grads(coef, kChunks), whole = single_grads(coef, 1);
  run_world(
      2,
      [&](ProcessGroup& world) {
        const nn::TransformerConfig c = config();
        auto m = std::make_shared<nn::Transformer>(c, /*seed=*/17);
        DeviceMesh mesh(borrow(world), {2}, {"ep"});
        const ep::ExpertParallelism ep = ep::parallelize_experts(*m, mesh);
        const Batch b = batch(c);
        const int64_t r = world.rank();
        for (int64_t k = 0; k < kChunks; ++k)
          chunk_backward(*m, ops::narrow(b.x, 0, 2 * k + r, 1), ops::narrow(b.y, 0, 2 * k + r, 1),
                         coef, kChunks);
        ep::sync_gradients(*m, ep);
        const auto named = m->named_parameters();
        double router_whole = 0;
        for (size_t i = 0; i < named.size(); ++i) {
          const auto& [name, p] = named[i];
          Tensor want = same[i], other = whole[i];
          if (ep::is_expert_shard(p)) {  // this rank's experts of the whole stack
            const int64_t L = p.size(0);
            want = ops::narrow(want, 0, r * L, L), other = ops::narrow(other, 0, r * L, L);
          }
          const double rel = relative_difference(p.grad(), want);
          expect(rel <= 1e-6, "coef ", coef, ", rank ", r, ": ", name,
                 "'s gradient differs from one process's over the same chunks by ", rel);
          if (name.find("router") != std::string::npos)
            router_whole = relative_difference(p.grad(), other);
        }
        if (coef > 0) {
          expect(router_whole > 1e-2, "rank ", r, ": the router's gradient is within ",
                 router_whole, " of one process's over one chunk");
        } else {
          expect(router_whole <= 1e-6, "rank ", r,
                 ": without the balancing loss the router's "
                 "gradient differs from one chunk's by ",
                 router_whole);
        }
      },
      std::chrono::seconds(60));
}

}  // namespace

TEST_CASE("ep 2 over 2 accumulation chunks gives one process's gradients over the same chunks",
          "[ep][accumulation][equivalence]") {
  check(0.01);
  check(0);
}
