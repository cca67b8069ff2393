// 12_expert_parallel: a mixture of experts with its experts on different
// ranks (chapter 16.8.2). Every block's MLP is an nn::MoE of E experts; a
// router sends each token to its top k. ep::parallelize_experts keeps E/ep
// experts per rank, and each MoE forward becomes a journey: the rows'
// counts exchanged, the rows sent to the ranks that own their experts by an
// uneven all_to_all, computed there, and sent home by the inverse one. The
// ranks are data parallel for everything else: each trains on its own
// batch, dense gradients are averaged over the ranks, expert gradients
// (which the all_to_all's backward already summed over every rank's
// tokens) divided by ep. The loss adds coef * the balancing loss.
// At the end: the tokens each expert received in the last step, from which
// rank, and the all_to_all bytes of a step beside the formula.
// Not here: dp x ep meshes (the test covers them), capacity per global batch.
//
//   spmdrun --standalone --nproc-per-node 2 12_expert_parallel --data docs/architecture.md
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "autograd/autograd.h"
#include "autograd/data/text_dataset.h"
#include "autograd/nn/memory_estimate.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "autograd/train_loop.h"
#include "examples/common/flags.h"
#include "parallel/comm/init.h"
#include "parallel/device_mesh.h"
#include "parallel/expert_parallel/expert_parallel.h"
#include "parallel/placement.h"
#include "runtime/flag_checks.h"
#include "runtime/resource_limits.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;
namespace ep = dist::ep;

namespace {

struct Flags {
  std::string data;
  int64_t steps = 50, batch = 4, experts = 4, top_k = 2, moe_every = 1, log_every = 10;
  double lr = 1e-3, aux_coef = 0.01, capacity_factor = 0;
  uint64_t seed = 1337;
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  examples::Cli cli("Train a mixture of experts with its experts split over the ranks (spmdrun).");
  cli.data(f.data).steps(f.steps).batch(f.batch, "sequences per rank per step");
  cli.lr(f.lr, "learning rate").seed(f.seed).log_every(f.log_every);
  CLI::App& app = cli.app();
  app.add_option("--experts", f.experts, "experts per MoE (divisible by the ranks)")
      ->check(spmd::flags::count(1));
  app.add_option("--top-k", f.top_k, "experts per token")->check(spmd::flags::count(1));
  app.add_option("--moe-every", f.moe_every, "an MoE in every n-th block")
      ->check(spmd::flags::count(1));
  app.add_option("--capacity-factor", f.capacity_factor, "per-expert capacity (0: no limit)")
      ->check(spmd::flags::number(0));
  app.add_option("--aux-coef", f.aux_coef, "weight of the balancing loss")
      ->check(spmd::flags::number(0));
  cli.parse(argc, argv);
  return f;
}

// Every rank's values, concatenated in rank order, on every rank.
std::vector<int64_t> gather(dist::ProcessGroup& g, const std::vector<int64_t>& mine) {
  Tensor all = ops::empty({g.size() * int64_t(mine.size())}, {DType::kI64});
  const Tensor in = ops::from_vector(mine, {int64_t(mine.size())});
  g.wait(g.all_gather(all, in), dist::OpType::kAllGather);
  return ops::to_vector<int64_t>(all);
}

// Rank 0 prints, per layer, each expert's tokens of the last step by
// sender, and the assignments the ranks dropped over capacity.
void print_tokens(dist::ProcessGroup& g, nn::Module& model, const ep::ExpertParallelism& par,
                  int64_t E) {
  const int P = g.size();
  const int64_t L = E / P;
  const auto layers = nn::moe_layers(model);
  for (size_t layer = 0; layer < par.dispatchers.size(); ++layer) {
    const std::vector<int64_t> all = gather(g, par.dispatchers[layer]->last().received);
    const nn::RoutingStats& routed = layers[layer].second->stats();
    const std::vector<int64_t> dropped = gather(g, {routed.dropped});
    if (g.rank() != 0) continue;
    int64_t dropped_total = 0;
    for (int64_t n : dropped) dropped_total += n;
    std::printf(
        "MoE %zu (capacity %s, %lld assignments dropped), the last step's tokens per "
        "expert by the rank that sent them:\n",
        layer, routed.capacity ? str_cat(routed.capacity, " per rank").c_str() : "unlimited",
        (long long)dropped_total);
    for (int q = 0; q < P; ++q) {
      for (int64_t l = 0; l < L; ++l) {
        int64_t total = 0;
        std::string from;
        for (int s = 0; s < P; ++s) {
          const int64_t n = all[size_t(q * P * L + s * L + l)];  // rank q's (source s, expert l)
          total += n;
          from += str_cat(s ? " + " : "", n, " from rank ", s);
        }
        std::printf("  rank %d expert %lld: %4lld tokens = %s\n", q, (long long)(q * L + l),
                    (long long)total, from.c_str());
      }
    }
  }
}

void train(const std::shared_ptr<dist::ProcessGroup>& world_ptr, const Flags& f) {
  dist::ProcessGroup& world = *world_ptr;
  const data::TextDataset ds = data::TextDataset::from_file(f.data);
  nn::TransformerConfig c = nn::TransformerConfig::preset("tiny");
  c.n_experts = f.experts;
  c.moe_top_k = f.top_k;
  c.moe_every = f.moe_every;
  c.moe_capacity_factor = f.capacity_factor;
  auto model = std::make_shared<nn::Transformer>(c, f.seed);  // the same weights everywhere
  const int64_t whole = model->num_parameters();
  dist::DeviceMesh mesh(world_ptr, {world.size()}, {"ep"});
  const ep::ExpertParallelism par = ep::parallelize_experts(*model, mesh);  // E/ep experts here
  const int64_t B = f.batch, T = c.max_seq_len;
  check_memory_fits(str_cat("training with --batch ", B, " per rank"),
                    nn::training_step_bytes_lower_bound(c, model->num_parameters(), B));
  if (world.rank() == 0)
    std::printf(
        "%d ep ranks, %zu MoE blocks of %lld experts (top %lld): %lld parameters, "
        "%lld here\n",
        world.size(), par.dispatchers.size(), (long long)f.experts, (long long)f.top_k,
        (long long)whole, (long long)model->num_parameters());

  const std::vector<Tensor> params = model->parameters();
  optim::AdamW opt(params, {.lr = f.lr, .weight_decay = 0.1});
  Generator batches(f.seed + 1 + uint64_t(world.rank()));  // each rank its own batches
  LogWindow window(f.log_every, f.steps);                  // autograd/train_loop.h, as in 01
  uint64_t a2a_bytes = 0;
  for (int64_t step = 0; step < f.steps; ++step) {
    const data::Batch b = ds.sample(data::Split::kTrain, B, T, batches);
    par.ep->reset_stats();
    const Tensor ce = cross_entropy((*model)(b.x), b.y);
    const Tensor aux = nn::moe_aux_loss(*model);  // the whole batch's, the same on every rank
    const Tensor loss = add(ce, mul(aux, f.aux_coef));
    opt.zero_grad();
    backward(loss);
    a2a_bytes = par.ep->stats()[dist::OpType::kAllToAll].bytes;  // forward and backward
    ep::sync_gradients(*model, par);  // dense: mean over ranks; experts: / ep
    dist::clip_grad_norm_(params, 1.0);
    opt.step();
    Tensor mean = ops::clone(detach(ce));
    world.wait(world.all_reduce(mean, dist::ReduceOp::kAvg), dist::OpType::kAllReduce);
    if (window.end_step(step, world.size() * B * T) && world.rank() == 0) {
      std::printf("step %lld loss %.4f aux per MoE %.4f tok/s %.0f\n", (long long)step,
                  mean.item<double>(), aux.item<double>() / double(par.dispatchers.size()),
                  window.tokens_per_second());
      std::fflush(stdout);
    }
  }
  print_tokens(world, *model, par, f.experts);
  // Per MoE and step: the E counts (8 bytes each); the rows this rank sent
  // (A, its kept assignments) and the rows it received (R), of C floats,
  // each twice: dispatch hands over A and combine R, and backward the
  // gradients of the same rows the other way. ProcessGroup counts what each
  // call was handed.
  int64_t formula = 0;
  const auto layers = nn::moe_layers(*model);
  for (size_t i = 0; i < layers.size(); ++i) {
    int64_t sent = 0, received = 0;
    for (int64_t n : layers[i].second->stats().tokens_per_expert) sent += n;
    for (int64_t n : par.dispatchers[i]->last().received) received += n;
    formula += f.experts * 8 + 2 * (sent + received) * c.d_model * 4;
  }
  const std::vector<int64_t> bytes = gather(world, {int64_t(a2a_bytes), formula});
  for (int r = 0; world.rank() == 0 && r < world.size(); ++r)
    std::printf("rank %d: all_to_all was handed %lld bytes in the last step, %s %lld\n", r,
                (long long)bytes[2 * r],
                bytes[2 * r] == bytes[2 * r + 1] ? "as the formula says:" : "but the formula says",
                (long long)bytes[2 * r + 1]);
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse_flags(argc, argv);
  try {
    auto world = dist::init_process_group();  // env://, the TCP backend
    set_num_threads(1);
    train(world, flags);
    dist::destroy_process_group(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "12_expert_parallel: %s\n", e.what());
    return 1;
  }
  return 0;
}
