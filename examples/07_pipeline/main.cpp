// 07_pipeline: 06_model_parallel's cut model, with the batch cut too (chapter
// 16.5.1). Each of p ranks holds one stage (pp::split_model: the embeddings
// and the first blocks, then blocks, then the last blocks, the norm and the
// head), and every step's batch is cut into M microbatches, so that stage 0
// computes microbatch 2 while stage 1 computes microbatch 1. A schedule says
// in which order each rank runs its forwards and backwards:
//   gpipe: every forward, then every backward (M microbatches in flight);
//   1f1b:  one forward and one backward in turn once the pipe is full (at
//          most p - r in flight on rank r): the same bubble, less memory;
//   interleaved: 1F1B over --stages-per-rank stages a rank (stage s on rank
//          s % p; M a multiple of p): a bubble that many times smaller;
//   zbh1:  1F1B with each backward split in the input gradient (sent at
//          once) and the weight gradient, run when the rank would idle.
// pp::PipelineExecutor runs this rank's list with the transfers between
// neighbours; the gradients accumulate over the microbatches, and the
// optimizer step, the LR schedule and the clipping by the norm over all the
// stages are 06's. Rank 0 first prints the schedule as a table, with the
// bubble and the peak microbatches in flight that pp::simulate finds; the
// last stage, which has the loss, logs training and at the end each rank's
// measured bubble beside the formula's (p - 1) / (M + p - 1).
// Not here: pipelines combined with data or tensor parallelism.
//
//   spmdrun --standalone --nproc-per-node 2 07_pipeline --data
//   ../shared/data/tinyshakespeare.txt --schedule 1f1b --microbatches 8
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/data/text_dataset.h"
#include "autograd/nn/memory_estimate.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "autograd/optim/clip_grad.h"
#include "autograd/optim/lr_schedule.h"
#include "autograd/train_loop.h"
#include "examples/common/flags.h"
#include "parallel/comm/init.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage.h"
#include "runtime/flag_checks.h"
#include "runtime/resource_limits.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;
namespace pp = dist::pp;

namespace {

struct Flags {
  std::string data, config = "tiny", schedule = "1f1b";
  int64_t steps = 600, batch = 8, warmup = 50, log_every = 50;
  int microbatches = 4, stages_per_rank = 2;
  double lr = 2e-3, grad_clip = 1.0;
  uint64_t seed = 1337;
  int threads = 1;
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  examples::Cli cli("Train the transformer as a pipeline, one stage per rank (under spmdrun).");
  cli.data(f.data).config(f.config).steps(f.steps);
  cli.batch(f.batch, "sequences per step (the same on every rank)");
  cli.lr(f.lr).warmup(f.warmup).grad_clip(f.grad_clip);
  cli.seed(f.seed).threads(f.threads).log_every(f.log_every);
  CLI::App& app = cli.app();
  app.add_option("--schedule", f.schedule, "gpipe, 1f1b, interleaved or zbh1");
  app.add_option("--stages-per-rank", f.stages_per_rank, "stages a rank holds under interleaved")
      ->check(spmd::flags::count(1));
  app.add_option("--microbatches", f.microbatches, "microbatches per step (they divide --batch)")
      ->check(spmd::flags::count(1));
  cli.parse(argc, argv);
  return f;
}

// Rank 0, before training: which blocks each stage holds, the schedule's
// picture, and what running it in unit time finds.
void print_plan(const pp::PipelineExecutor& executor, int64_t num_layers, const Flags& f, int p,
                int v) {
  const int64_t L = num_layers;
  const int m = f.microbatches, S = p * v;
  const std::vector<int64_t> starts = pp::split_layers_interleaved(L, p, v);  // of stages 1..S-1
  std::printf("config %s, untied head, %d stages over %lld blocks:", f.config.c_str(), S,
              (long long)L);
  for (int s = 0; s < S; ++s) {
    const int64_t first = s == 0 ? 0 : starts[s - 1], end = s == S - 1 ? L : starts[s];
    std::printf(" %d: layers %lld-%lld%s", s, (long long)first, (long long)(end - 1),
                s == S - 1 ? "\n" : ",");
  }
  std::printf("%s, the batch of %lld sequences in %d microbatches\n%s", f.schedule.c_str(),
              (long long)f.batch, m, pp::to_table(executor.schedule(), S, m).c_str());
  const pp::SimulationResult sim = pp::simulate(executor.schedule(), S, m);
  std::printf("simulated: %d time steps, bubble %.3f (the formula's %.3f), peak in flight",
              sim.steps, sim.bubble, pp::predicted_bubble(pp::parse_schedule(f.schedule), p, m, v));
  for (int n : sim.peak_in_flight) std::printf(" %d", n);
  std::printf("\n");
  std::fflush(stdout);
}

// The last stage prints every rank's mean measured bubble, gathered so that
// the lines come out in rank order.
void print_bubbles(dist::ProcessGroup& world, double bubble, const Flags& f, int v) {
  const int p = world.size();
  const Tensor all = ops::empty({p}, {DType::kF64});
  world.all_gather(all, ops::scalar_tensor(bubble, {DType::kF64})).wait();
  if (world.rank() != p - 1) return;
  const double predicted =
      pp::predicted_bubble(pp::parse_schedule(f.schedule), p, f.microbatches, v);
  for (int r = 0; r < p; ++r) {
    std::string held = str_cat("stage", v > 1 ? "s " : " ", r);
    for (int i = 1; i < v; ++i) held += str_cat(", ", r + i * p);
    std::printf("rank %d (%s): bubble measured %.3f, predicted %.3f (%s, %d microbatches)\n", r,
                held.c_str(), all.data<double>()[r], predicted, f.schedule.c_str(), f.microbatches);
  }
}

void train(dist::ProcessGroup& world, const Flags& f) {
  set_num_threads(f.threads);
  const int p = world.size(), rank = world.rank();
  const data::TextDataset ds = data::TextDataset::from_file(f.data);
  nn::TransformerConfig config = nn::TransformerConfig::preset(f.config);
  config.tie_embeddings = false;  // the head would span the first and the last stage
  // The whole model on every rank, the same weights; each keeps its stage.
  auto model = std::make_shared<nn::Transformer>(config, f.seed);
  const pp::ScheduleKind kind = pp::parse_schedule(f.schedule);
  const int v = kind == pp::ScheduleKind::kInterleaved1F1B ? f.stages_per_rank : 1;
  // This rank's stages: rank, rank + p, ... (refuses more stages than blocks).
  std::vector<pp::TransformerStage> stages = pp::split_model_interleaved(model, rank, p, v);
  std::vector<pp::TransformerStage*> mine;
  std::vector<Tensor> params;
  for (pp::TransformerStage& st : stages) {
    mine.push_back(&st);
    for (const Tensor& t : st.parameters()) params.push_back(t);
  }
  pp::PipelineExecutor executor(mine, world, kind, f.microbatches);
  if (rank == 0) print_plan(executor, config.n_layers, f, p, v);

  optim::AdamW opt(params, {.lr = f.lr, .weight_decay = 0.1});
  const optim::WarmupCosine schedule(f.lr, std::min(f.warmup, f.steps), f.steps, f.lr / 10);
  const auto sum_over_stages = [&world](double sq) {  // every stage's squared gradients
    Tensor s = ops::scalar_tensor(sq, {DType::kF64});
    world.wait(world.all_reduce(s), dist::OpType::kAllReduce);
    return s.item<double>();
  };
  Generator batches(f.seed + 1);  // the same seed on every rank: the same batches
  const int64_t B = f.batch, T = config.max_seq_len;
  check_memory_fits(
      str_cat("training with --batch ", B, " (1/", p, " of the model per rank)"),
      nn::training_step_bytes_lower_bound(config, model->num_parameters(), B) / uint64_t(p));
  double bubble_sum = 0;  // over the steps after the first (which connects and allocates)
  world.barrier().wait();
  LogWindow window(f.log_every, f.steps);  // autograd/train_loop.h, as in 01
  for (int64_t step = 0; step < f.steps; ++step) {
    const data::Batch b = ds.sample(data::Split::kTrain, B, T, batches);
    opt.zero_grad();
    const double loss = executor.step(b.x, b.y);  // NaN but on the last stage
    if (f.grad_clip > 0) optim::clip_grad_norm_(params, f.grad_clip, sum_over_stages);
    opt.set_lr(schedule(step));
    opt.step();
    if (step > 0 || f.steps == 1) bubble_sum += executor.measured_bubble();

    if (window.end_step(step, B * T) && stages.back().is_last()) {
      std::printf("step %lld loss %.4f tok/s %.0f\n", (long long)step, loss,
                  window.tokens_per_second());
      std::fflush(stdout);
    }
  }
  print_bubbles(world, bubble_sum / double(std::max<int64_t>(1, f.steps - 1)), f, v);
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse_flags(argc, argv);
  try {
    auto world = dist::init_process_group();  // env://, the TCP backend
    train(*world, flags);
    dist::destroy_process_group(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "07_pipeline: %s\n", e.what());
    return 1;
  }
  return 0;
}
