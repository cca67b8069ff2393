// 04_manual_data_parallel: why data parallelism needs gradient
// synchronization (chapter 16.3), and the synchronization written by hand.
//
// Every rank builds the same model (same seed) and trains it on its own
// shard of the data. Run twice:
//   1. without synchronization: each rank steps on its own gradients, so the
//      copies drift apart: after a few steps they are different models;
//   2. with an all_reduce (average) of every gradient after backward: every
//      rank takes the same step, so the copies stay identical, and the step
//      is the one a single process would take on the union of the shards.
//
//   spmdrun --standalone --nproc-per-node 2 04_manual_data_parallel
//
// The loop over parameters below is the whole idea of DDP; 05_ddp hands it
// to dist::DistributedDataParallel, which overlaps it with backward.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/nn/layers.h"
#include "autograd/optim/sgd.h"
#include "parallel/comm/init.h"
#include "runtime/flag_checks.h"
#include "tensor/ops.h"

using namespace spmd;

namespace {

// A two-layer regression model: 16 -> 32 -> 1.
class Net : public nn::Module {
 public:
  explicit Net(uint64_t seed) {
    Generator gen(seed);
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(16, 32, true, &gen));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 1, true, &gen));
  }
  Tensor forward(const Tensor& x) override { return (*fc2)(tanh((*fc1)(x))); }
  std::string type_name() const override { return "Net"; }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

// This rank's shard: inputs and targets y = sum(sin(x)), drawn from a
// rank-specific seed, so each rank sees different examples.
std::pair<Tensor, Tensor> shard(int rank, int64_t rows) {
  Generator gen(1000 + uint64_t(rank));
  Tensor x = ops::randn({rows, 16}, {}, &gen);
  Tensor y = ops::sum(ops::sin(x), {1}, /*keepdim=*/true);
  return {x, y};
}

// The largest difference between this rank's parameters and rank 0's.
double max_difference_from_rank0(dist::ProcessGroup& world, Net& model) {
  double worst = 0;
  for (const Tensor& p : model.parameters()) {
    Tensor root = ops::clone(p);
    world.broadcast(root, 0).wait();  // rank 0's values everywhere
    worst = std::max(worst, ops::amax(ops::abs(ops::sub(p, root))).item<double>());
  }
  Tensor w = ops::full({1}, worst, {});
  world.all_reduce(w, dist::ReduceOp::kMax).wait();  // the worst over all ranks
  return w.item<double>();
}

// Trains one copy of the model per rank; synchronizes gradients if asked.
void train(dist::ProcessGroup& world, bool synchronize, int steps) {
  Net model(/*seed=*/42);  // the same initial weights on every rank
  optim::SGD opt(model.parameters(), {.lr = 0.05});
  const auto [x, y] = shard(world.rank(), 64);
  for (int step = 0; step < steps; ++step) {
    const Tensor loss = mean(square(sub(model(x), y)));
    opt.zero_grad();
    backward(loss);
    if (synchronize) {
      // The manual data-parallel step: average each gradient over the ranks.
      for (const Tensor& p : model.parameters()) {
        world.all_reduce(p.grad(), dist::ReduceOp::kAvg).wait();
      }
    }
    opt.step();
    if (step % 10 == 0 || step == steps - 1) {
      const double drift = max_difference_from_rank0(world, model);
      if (world.rank() == 0)
        std::printf("  step %3d  rank 0 loss %.4f  max |params - rank 0's| over ranks %.3g\n", step,
                    loss.item<double>(), drift);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 50;
  CLI::App app{"Data parallelism by hand: copies diverge unless gradients are all-reduced."};
  app.add_option("--steps", steps, "SGD steps per run")->check(spmd::flags::count(1));
  CLI11_PARSE(app, argc, argv);
  try {
    auto world = dist::init_process_group();  // env://, the TCP backend
    if (world->rank() == 0)
      std::printf("1. no gradient synchronization (%d ranks)\n", world->size());
    train(*world, /*synchronize=*/false, steps);
    if (world->rank() == 0) std::printf("2. gradients all-reduced (averaged) by hand\n");
    train(*world, /*synchronize=*/true, steps);
    dist::destroy_process_group(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "04_manual_data_parallel: %s\n", e.what());
    return 1;
  }
  return 0;
}
