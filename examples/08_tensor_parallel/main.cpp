// 08_tensor_parallel: one layer's matrices split over the ranks (chapter
// 16.5.2). Every rank holds a slice of every weight and all of them compute
// each layer together, so they all see the same batch.
//   - First the chapter's linear layer y = x W^T + b (8 inputs -> 12 outputs)
//     split two ways and checked against the unsplit layer on every rank:
//     column-wise (rank r holds rows of W and b, some of the outputs, then
//     gathered) and row-wise (rank r holds columns of W, some of the inputs:
//     its product is a partial sum, all_reduced, and b is added once).
//   - Then the transformer of 01_train_single trained tensor-parallel:
//     tp::parallelize_transformer splits attention by heads and the MLP by
//     hidden units (Megatron's plan), the embedding and head by vocabulary,
//     and tp::vocab_parallel_cross_entropy takes the loss of the
//     vocab-sharded logits without gathering them. --sequence-parallel also
//     cuts the norms' and residuals' tokens. The last line compares each
//     rank's parameter bytes with the unsplit model's and the bytes the tp
//     group moved in a step with the plan's formula.
// Not here: tp combined with data parallelism (09_device_mesh).
//
//   spmdrun --standalone --nproc-per-node 2 08_tensor_parallel --data
//   ../shared/data/tinyshakespeare.txt
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "autograd/autograd.h"
#include "autograd/data/text_dataset.h"
#include "autograd/nn/layers.h"
#include "autograd/nn/memory_estimate.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "autograd/optim/lr_schedule.h"
#include "autograd/train_loop.h"
#include "examples/common/flags.h"
#include "parallel/comm/init.h"
#include "parallel/device_mesh.h"
#include "parallel/placement.h"
#include "parallel/tensor_parallel/loss.h"
#include "parallel/tensor_parallel/plan.h"
#include "runtime/flag_checks.h"
#include "runtime/resource_limits.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;
namespace tp = dist::tp;

namespace {

constexpr double kTolerance = 1e-5;  // f32, a different summation order

struct Flags {
  std::string data, config = "tiny";
  int64_t steps = 600, batch = 8, warmup = 50, log_every = 50, in_features = 8, out_features = 12;
  double lr = 2e-3, grad_clip = 1.0;
  uint64_t seed = 1337;
  int threads = 1;
  bool sequence_parallel = false;
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  examples::Cli cli("Split a linear layer, then a transformer, over the ranks (under spmdrun).");
  cli.data(f.data).config(f.config).steps(f.steps);
  cli.batch(f.batch, "sequences per step (the same on every rank)");
  cli.lr(f.lr).warmup(f.warmup).grad_clip(f.grad_clip);
  cli.seed(f.seed).threads(f.threads).log_every(f.log_every);
  CLI::App& app = cli.app();
  app.add_flag("--sequence-parallel", f.sequence_parallel, "norms and residuals on T/tp tokens");
  app.add_option("--in-features", f.in_features, "the linear layer's inputs")
      ->check(spmd::flags::count(1));
  app.add_option("--out-features", f.out_features, "the linear layer's outputs")
      ->check(spmd::flags::count(1));
  cli.parse(argc, argv);
  return f;
}

// The layer's output for x (B, in) and the input gradient for an upstream
// gradient dy (B, out): backward of sum(y * dy).
struct Result {
  Tensor y, dx;
};
Result run_layer(nn::Linear& layer, const Tensor& x0, const Tensor& dy) {
  Tensor x = ops::clone(x0);
  x.requires_grad_();
  const Tensor y = layer(x);
  backward(sum(mul(y, dy)));
  return {detach(y), x.grad()};
}

double max_difference(const Tensor& a, const Tensor& b) {
  return ops::amax(ops::abs(ops::sub(a, b))).item<double>();
}

// The chapter's linear layer, split column-wise then row-wise over `tp_mesh`,
// against the unsplit layer. Every rank draws the same weights, x and dy.
void check_linear(const dist::DeviceMesh& tp_mesh, int64_t in, int64_t out) {
  Generator data_gen(7);
  const Tensor x = ops::randn({4, in}, {}, &data_gen);    // (B, in)
  const Tensor dy = ops::randn({4, out}, {}, &data_gen);  // (B, out)
  Generator whole_gen(3);
  nn::Linear whole(in, out, /*bias=*/true, &whole_gen);
  const Result want = run_layer(whole, x, dy);
  for (bool colwise : {true, false}) {
    Generator split_gen(3);  // the same weights, before the split
    nn::Linear split(in, out, /*bias=*/true, &split_gen);
    if (colwise) {  // W (out/tp, in), b (out/tp): y's columns, gathered
      tp::ColwiseParallel({.output = tp::Layout::kReplicate}).apply(split, "fc", tp_mesh);
    } else {  // W (out, in/tp), b whole: partial sums of y, all_reduced, + b
      tp::RowwiseParallel({.input = tp::Layout::kReplicate}).apply(split, "fc", tp_mesh);
    }
    const Result got = run_layer(split, x, dy);
    const double y_diff = max_difference(got.y, want.y), dx_diff = max_difference(got.dx, want.dx);
    std::printf("%s: W %s of %s here, max difference output %.2g input grad %.2g\n",
                colwise ? "column-wise" : "row-wise", str_cat(split.weight.shape()).c_str(),
                str_cat(whole.weight.shape()).c_str(), y_diff, dx_diff);
    SPMD_CHECK(y_diff <= kTolerance && dx_diff <= kTolerance, "the ",
               colwise ? "column-wise" : "row-wise", " layer differs from the unsplit one");
  }
}

int64_t parameter_bytes(const nn::Module& model) {
  int64_t bytes = 0;
  for (const Tensor& p : model.parameters()) bytes += int64_t(p.nbytes());
  return bytes;
}

void train(const dist::DeviceMesh& mesh, const Flags& f) {
  dist::ProcessGroup& tp_group = mesh.group("tp");
  const bool lead = tp_group.rank() == 0;
  const data::TextDataset ds = data::TextDataset::from_file(f.data);
  auto model = std::make_shared<nn::Transformer>(nn::TransformerConfig::preset(f.config), f.seed);
  const int64_t unsplit_bytes = parameter_bytes(*model);
  tp::parallelize_transformer(*model, mesh, f.sequence_parallel);  // now this rank's slices
  const int64_t B = f.batch, T = model->config.max_seq_len;
  check_memory_fits(str_cat("training with --batch ", B, " (config ", f.config, ")"),
                    nn::training_step_bytes_lower_bound(model->config, model->num_parameters(), B) /
                        uint64_t(tp_group.size()));
  if (lead)
    std::printf("%d tp ranks, config %s%s: %lld parameters, %lld tokens per step\n",
                tp_group.size(), f.config.c_str(),
                f.sequence_parallel ? " + sequence parallel" : "", (long long)(unsplit_bytes / 4),
                (long long)(B * T));

  const std::vector<Tensor> params = model->parameters();
  optim::AdamW opt(params, {.lr = f.lr, .weight_decay = 0.1});
  const optim::WarmupCosine schedule(f.lr, std::min(f.warmup, f.steps), f.steps, f.lr / 10);
  Generator batches(f.seed + 1);  // the same seed on every rank: the same batches
  dist::CommStats step_stats;
  LogWindow window(f.log_every, f.steps);  // autograd/train_loop.h, as in 01
  for (int64_t step = 0; step < f.steps; ++step) {
    const data::Batch b = ds.sample(data::Split::kTrain, B, T, batches);
    tp_group.reset_stats();
    const Tensor logits = (*model)(b.x);                                          // (B, T, V/tp)
    const Tensor loss = tp::vocab_parallel_cross_entropy(logits, b.y, tp_group);  // the same on all
    opt.zero_grad();
    backward(loss);
    step_stats = tp_group.stats();  // forward and backward; clipping adds a scalar all_reduce
    if (f.grad_clip > 0) dist::clip_grad_norm_(params, f.grad_clip);  // squares summed over tp
    opt.set_lr(schedule(step));
    opt.step();

    if (window.end_step(step, B * T) && lead) {
      std::printf("step %lld loss %.4f tok/s %.0f\n", (long long)step, loss.item<double>(),
                  window.tokens_per_second());
      std::fflush(stdout);
    }
  }
  const uint64_t moved = step_stats.total_bytes();
  const uint64_t formula =
      tp::transformer_tp_comm_per_step(model->config, B, T, f.sequence_parallel).total_bytes();
  if (lead)
    std::printf(
        "parameters %lld bytes per rank of %lld unsplit (1/%.2f); tp moved %llu bytes per "
        "step, %s %llu\n",
        (long long)parameter_bytes(*model), (long long)unsplit_bytes,
        double(unsplit_bytes) / double(parameter_bytes(*model)), (unsigned long long)moved,
        moved == formula ? "as the formula says:" : "but the formula says",
        (unsigned long long)formula);
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse_flags(argc, argv);
  try {
    auto world = dist::init_process_group();  // env://, the TCP backend
    set_num_threads(flags.threads);
    {
      // The tp styles take their group from a mesh axis, as every strategy
      // does; here the mesh has one axis, "tp", of every rank, so
      // mesh.group("tp") is a group of the whole world. 09_device_mesh shows
      // what a mesh is for: several axes, one group along each.
      const dist::DeviceMesh mesh(world, {world->size()}, {"tp"});
      check_linear(mesh, flags.in_features, flags.out_features);
      train(mesh, flags);
    }
    dist::destroy_process_group(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "08_tensor_parallel: %s\n", e.what());
    return 1;
  }
  return 0;
}
