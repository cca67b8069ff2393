// 06_model_parallel: 01_train_single's transformer cut in two between its
// layers (chapter 16.5), for a model too large for one device. Rank 0 holds
// the first half (the embeddings and layers 0..L/2-1), rank 1 the second
// (layers L/2..L-1, the final norm and the head). The activation at the cut
// travels forward over a point-to-point send, and its gradient travels back
// (each rank's half is pp::split_model(model, rank, 2)):
//   rank 0: h = half(x); token = dist::send(h, 1); backward(token);
//   rank 1: h = dist::recv(shape, 0); loss = ce(half(h), y); backward(loss);
// rank 1's backward sends dh from the recv's gradient hook, and rank 0's
// backward(token) receives it and carries on through its half. Both ranks
// draw the same batches; each AdamW holds only the rank's own parameters, and
// the gradients are clipped by the norm over both halves. Only one rank
// computes at a time (naive model parallelism): the last lines show each
// rank's share of the step spent waiting for the other, which pipelining
// (parallel/pipeline/, docs/pipeline.md) shrinks. The head is untied from the embedding, which
// lives on rank 0.
//
//   spmdrun --standalone --nproc-per-node 2 06_model_parallel --data
//   ../shared/data/tinyshakespeare.txt
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/data/text_dataset.h"
#include "autograd/nn/memory_estimate.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "autograd/optim/clip_grad.h"
#include "autograd/optim/lr_schedule.h"
#include "autograd/train_loop.h"
#include "examples/common/flags.h"
#include "parallel/comm/init.h"
#include "parallel/functional.h"
#include "parallel/pipeline/stage.h"
#include "runtime/resource_limits.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;
namespace pp = dist::pp;
using Clock = std::chrono::steady_clock;

namespace {

struct Flags {
  std::string data, config = "tiny";
  int64_t steps = 600, batch = 8, warmup = 50, log_every = 50;
  double lr = 2e-3, grad_clip = 1.0;
  uint64_t seed = 1337;
  int threads = 1;
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  examples::Cli cli("Train the transformer cut in two over 2 ranks (run it under spmdrun).");
  cli.data(f.data).config(f.config).steps(f.steps);
  cli.batch(f.batch, "sequences per step (the same on both ranks)");
  cli.lr(f.lr).warmup(f.warmup).grad_clip(f.grad_clip);
  cli.seed(f.seed).threads(f.threads).log_every(f.log_every);
  cli.parse(argc, argv);
  return f;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One step's forward and backward across the cut; returns the loss on rank 1
// (undefined on rank 0). Adds the rank's two phases to `phase`: rank 0's own
// forward and backward(token), rank 1's recv and its forward and backward.
Tensor forward_backward(pp::TransformerStage& half, const data::Batch& b, dist::ProcessGroup& world,
                        double phase[2]) {
  Tensor loss;
  auto t = Clock::now();
  if (world.rank() == 0) {
    const Tensor token = dist::send(half.forward(b.x), 1, world);  // h (B, T, C) to rank 1
    phase[0] += seconds_since(t), t = Clock::now();
    backward(token);  // waits for dh from rank 1, then runs rank 0's backward
  } else {
    const Shape shape = {b.x.size(0), b.x.size(1), half.model().config.d_model};  // (B, T, C)
    const Tensor h = dist::recv(shape, DType::kF32, Device::cpu(), 0, world);
    phase[0] += seconds_since(t), t = Clock::now();
    loss = cross_entropy(half.forward(h), b.y);  // logits (B, T, V)
    backward(loss);                              // h's hook sends dh back to rank 0
  }
  phase[1] += seconds_since(t);
  return loss;
}

// Before training, on the first batch: the loss across the cut (forward only)
// against the whole model's on rank 1, whose copy still holds rank 0's
// weights too (no update has run yet).
void check_against_whole(nn::Transformer& whole_model, pp::TransformerStage& half,
                         const data::Batch& b, dist::ProcessGroup& world) {
  NoGradGuard no_grad;
  if (world.rank() == 0) {
    dist::send(half.forward(b.x), 1, world);
    return;
  }
  const Shape shape = {b.x.size(0), b.x.size(1), whole_model.config.d_model};  // (B, T, C)
  const Tensor h = dist::recv(shape, DType::kF32, Device::cpu(), 0, world);
  const double cut = cross_entropy(half.forward(h), b.y).item<double>();
  const double whole = cross_entropy(whole_model(b.x), b.y).item<double>();
  std::printf(
      "first batch, before training: loss across the cut %.6f, of the whole model %.6f "
      "(difference %.2g)\n",
      cut, whole, cut - whole);
}

int64_t count(const std::vector<Tensor>& params) {
  int64_t n = 0;
  for (const Tensor& p : params) n += p.numel();
  return n;
}

// Rank 1 prints each rank's phases and the share of its step it spent
// blocked in communication, as its ProcessGroup counted it (wait_ns).
void print_idle_shares(dist::ProcessGroup& world, double steps, double loop, const double phase[2],
                       const dist::CommStats& stats) {
  using dist::OpType;
  const double p2p = double(stats[OpType::kRecv].wait_ns + stats[OpType::kSend].wait_ns) * 1e-9;
  const double norm = double(stats[OpType::kAllReduce].wait_ns) * 1e-9;
  const Tensor mine =
      ops::from_vector(std::vector<double>{loop, phase[0], phase[1], p2p, norm}, {5});
  const Tensor rows = ops::empty({2, 5}, {DType::kF64});  // both ranks' numbers
  world.all_gather(rows, mine).wait();
  if (world.rank() != 1) return;
  const char* names[2][2] = {{"forward", "backward(token)"}, {"recv", "forward+backward"}};
  for (int r = 0; r < 2; ++r) {
    const double* v = rows.data<double>() + 5 * r;  // loop, phase 0, phase 1, p2p, norm (s)
    const double ms = 1e3 / steps, waiting = (v[3] + v[4]) / v[0];
    std::printf("rank %d: %s %.1f ms, %s %.1f ms of a %.1f ms step\n", r, names[r][0], v[1] * ms,
                names[r][1], v[2] * ms, v[0] * ms);
    std::printf(
        "rank %d: busy %.0f%% of each step, waiting %.0f%% for rank %d (%.0f%% in "
        "send/recv, %.0f%% in the norm's all_reduce)\n",
        r, 100 * (1 - waiting), 100 * waiting, 1 - r, 100 * v[3] / v[0], 100 * v[4] / v[0]);
  }
}

void train(dist::ProcessGroup& world, const Flags& f) {
  SPMD_CHECK(world.size() == 2, "the model is cut in two, one half per rank: run on exactly 2 ",
             "ranks (spmdrun --nproc-per-node 2), not ", world.size());
  set_num_threads(f.threads);
  const bool lead = world.rank() == 1;  // the rank that has the loss logs
  const data::TextDataset ds = data::TextDataset::from_file(f.data);
  nn::TransformerConfig config = nn::TransformerConfig::preset(f.config);
  config.tie_embeddings = false;  // the head gets its own weight, on rank 1
  // Whole on both ranks, the same weights; each rank keeps its half
  // (pp::split_model: the embeddings and the first blocks, or the rest, the
  // norm and the head).
  auto model = std::make_shared<nn::Transformer>(config, f.seed);
  pp::TransformerStage half = pp::split_model(model, world.rank(), 2);
  const int64_t B = f.batch, T = config.max_seq_len, L = config.n_layers;
  check_memory_fits(str_cat("training with --batch ", B, " (half the model per rank)"),
                    nn::training_step_bytes_lower_bound(config, model->num_parameters(), B) / 2);
  if (lead)
    std::printf(
        "config %s, untied head: rank 0 holds the embeddings and layers 0-%lld (%lld "
        "parameters), rank 1 layers %lld-%lld, norm and head (%lld)\n",
        f.config.c_str(), (long long)(L / 2 - 1),
        (long long)count(pp::split_model(model, 0, 2).parameters()), (long long)(L / 2),
        (long long)(L - 1), (long long)count(pp::split_model(model, 1, 2).parameters()));

  const std::vector<Tensor> params = half.parameters();
  optim::AdamW opt(params, {.lr = f.lr, .weight_decay = 0.1});
  const optim::WarmupCosine schedule(f.lr, std::min(f.warmup, f.steps), f.steps, f.lr / 10);
  const auto sum_over_ranks = [&world](double sq) {  // the two halves' squared gradients
    Tensor s = ops::scalar_tensor(sq, {DType::kF64});
    world.wait(world.all_reduce(s), dist::OpType::kAllReduce);
    return s.item<double>();
  };
  Generator batches(f.seed + 1);  // the same seed on both ranks: the same batches
  Generator first(f.seed + 1);    // the first of them, for the check
  check_against_whole(*model, half, ds.sample(data::Split::kTrain, B, T, first), world);
  double phase[2] = {0, 0};
  world.barrier().wait();  // start both clocks after the check
  world.reset_stats();
  const auto loop_start = Clock::now();
  LogWindow window(f.log_every, f.steps);  // autograd/train_loop.h, as in 01
  for (int64_t step = 0; step < f.steps; ++step) {
    const data::Batch b = ds.sample(data::Split::kTrain, B, T, batches);
    opt.zero_grad();
    const Tensor loss = forward_backward(half, b, world, phase);
    if (f.grad_clip > 0) optim::clip_grad_norm_(params, f.grad_clip, sum_over_ranks);
    opt.set_lr(schedule(step));
    opt.step();

    if (window.end_step(step, B * T) && lead) {
      std::printf("step %lld loss %.4f tok/s %.0f\n", (long long)step, loss.item<double>(),
                  window.tokens_per_second());
      std::fflush(stdout);
    }
  }
  const double loop = seconds_since(loop_start);
  print_idle_shares(world, double(f.steps), loop, phase, world.stats());
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse_flags(argc, argv);
  try {
    auto world = dist::init_process_group();  // env://, the TCP backend
    train(*world, flags);
    dist::destroy_process_group(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "06_model_parallel: %s\n", e.what());
    return 1;
  }
  return 0;
}
