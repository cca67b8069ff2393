// spmd-bench-pp: pipeline-parallel training of the small GPT-2-shaped
// transformer (untied head, 6 blocks) on CPU ranks, for several schedules
// and microbatch counts, with the measured bubble beside the predicted one.
// Run it under spmdrun, or alone for the one-process reference:
//
//   spmdrun --standalone --nproc-per-node 2 spmd-bench-pp --schedules gpipe,1f1b,interleaved,zbh1
//   --microbatches 1,2,4,8,16
//   spmd-bench-pp --single
//
// Each (schedule, m) trains --steps steps of a global batch of --batch
// sequences after --warmup untimed ones; a step is the pipeline's forwards
// and backwards and the AdamW step. Rank 0 prints one line per run:
//   spmd-pp schedule=1f1b m=8 stages=2 tokens_per_s=... step_ms=... bubble=... predicted=...
//   in_flight=... act_mb=r0,r1 peak_rss_mb=...
// bubble: the share of a step a rank spent not computing (waiting on its
// neighbours, or idle at the start and end), the median step's, averaged
// over ranks; predicted: the schedule's simulated bubble under
// pp::typical_costs ((p - 1) / (m + p - 1) for GPipe and 1F1B, (p - 1) /
// (vm + p - 1) interleaved over v = --stages-per-rank stages a rank, (p -
// 1) / (3m + p - 1) for ZB-H1 from m = p); in_flight: the most (stage,
// microbatch) pairs a rank holds at once (the schedule's simulation), which
// activation memory follows; act_mb: per rank, the allocator's peak during
// the step (its forwards and backwards) less what is still allocated after
// it (parameters, gradients): the activations' peak, the median step's;
// cpu_ms: per rank, the CPU time the process used in the median step (all
// its threads; a rank's waits cost none but what it spins); best_step_ms:
// the fastest timed step (on a shared machine other jobs only add time, so
// the fastest is the least disturbed).
// A microbatch count the interleaved schedule refuses (not a multiple of p)
// is skipped with a note on stderr. --single prints `spmd-pp
// schedule=single ...`. bench/pp_bench.py runs them side by side.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "autograd/autograd.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "bench/step_stats.h"
#include "parallel/comm/init.h"
#include "parallel/pipeline/executor.h"
#include "runtime/flag_checks.h"
#include "runtime/trace.h"
#include "tensor/cpu/allocator.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;
namespace pp = dist::pp;

namespace {

using bench::cpu_seconds;
using bench::median;
using bench::peak_rss_mb;

struct Flags {
  std::string schedules = "gpipe,1f1b,interleaved,zbh1", microbatches = "1,2,4,8,16";
  bool single = false;
  int threads = 1, steps = 3, warmup = 1, stages_per_rank = 2;
  int64_t batch = 16;
};

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

nn::TransformerConfig bench_config() {
  nn::TransformerConfig c = nn::TransformerConfig::preset("small");
  c.tie_embeddings = false;  // a pipeline cannot split a tied head (parallel/pipeline/stage.h)
  return c;
}

std::vector<Tensor> batches(const nn::TransformerConfig& c, int64_t B, int n) {
  Generator gen(1);
  std::vector<Tensor> out;
  for (int i = 0; i < 2 * n; ++i)
    out.push_back(ops::randint(0, c.vocab_size, {B, c.max_seq_len}, {DType::kI64}, &gen));
  return out;  // ids and targets, alternating
}

// The allocator's peak since reset_host_peak_memory() less what is
// allocated now, in MB.
double activation_mb() {
  const cpu::HostMemoryStats m = cpu::host_memory_stats();
  return double(m.peak_allocated - m.allocated) / (1 << 20);
}

void run_single(const Flags& f) {
  const auto c = bench_config();
  auto model = std::make_shared<nn::Transformer>(c, 0);
  optim::AdamW opt(model->parameters(), {.lr = 3e-4, .weight_decay = 0.1});
  const auto data = batches(c, f.batch, f.warmup + f.steps);
  std::vector<double> step_s, cpu_s, act;
  for (int i = 0; i < f.warmup + f.steps; ++i) {
    const int64_t start = trace_now_us();
    const double cpu_start = cpu_seconds();
    opt.zero_grad();
    cpu::reset_host_peak_memory();
    {
      const Tensor loss = cross_entropy((*model)(data[2 * i]), data[2 * i + 1]);
      backward(loss);
    }
    act.push_back(activation_mb());
    opt.step();
    if (i < f.warmup) continue;
    step_s.push_back(double(trace_now_us() - start) / 1e6);
    cpu_s.push_back(cpu_seconds() - cpu_start);
  }
  const double step = median(step_s);
  std::printf(
      "spmd-pp schedule=single m=1 stages=1 tokens_per_s=%.0f step_ms=%.1f bubble=0 "
      "predicted=0 in_flight=1 act_mb=%.1f cpu_ms=%.0f best_step_ms=%.1f peak_rss_mb=%.1f\n",
      double(f.batch * c.max_seq_len) / step, step * 1e3, median(act), median(cpu_s) * 1e3,
      *std::min_element(step_s.begin(), step_s.end()) * 1e3, peak_rss_mb());
}

void run_pipeline(dist::ProcessGroup& world, const std::string& name, int m, const Flags& f) {
  const auto c = bench_config();
  const pp::ScheduleKind kind = pp::parse_schedule(name);
  const int p = world.size();
  const int v = kind == pp::ScheduleKind::kInterleaved1F1B ? f.stages_per_rank : 1;
  if (kind == pp::ScheduleKind::kInterleaved1F1B && m % p != 0) {
    if (world.rank() == 0)
      std::fprintf(stderr, "spmd-bench-pp: interleaved m=%d skipped (not a multiple of %d)\n", m,
                   p);
    return;
  }
  auto model = std::make_shared<nn::Transformer>(c, 0);
  std::vector<pp::TransformerStage> stages = pp::split_model_interleaved(model, world.rank(), p, v);
  std::vector<pp::TransformerStage*> mine;
  std::vector<Tensor> params;
  for (pp::TransformerStage& st : stages) {
    mine.push_back(&st);
    for (const Tensor& t : st.parameters()) params.push_back(t);
  }
  pp::PipelineExecutor executor(mine, world, kind, m);
  optim::AdamW opt(params, {.lr = 3e-4, .weight_decay = 0.1});
  const auto data = batches(c, f.batch, f.warmup + f.steps);
  std::vector<double> step_s, cpu_s, bubbles, act;
  for (int i = 0; i < f.warmup + f.steps; ++i) {
    world.barrier().wait();  // start the ranks' steps together
    const int64_t start = trace_now_us();
    const double cpu_start = cpu_seconds();
    opt.zero_grad();
    cpu::reset_host_peak_memory();
    executor.step(data[2 * i], data[2 * i + 1]);
    act.push_back(activation_mb());
    opt.step();
    if (i < f.warmup) continue;
    step_s.push_back(double(trace_now_us() - start) / 1e6);
    cpu_s.push_back(cpu_seconds() - cpu_start);
    bubbles.push_back(executor.measured_bubble());
  }
  // The median step's bubble, averaged over the ranks.
  Tensor bubble = ops::full({1}, median(bubbles), {DType::kF64});
  world.all_reduce(bubble, dist::ReduceOp::kAvg).wait();
  const auto sim = pp::simulate(executor.schedule(), p * v, m);
  auto per_rank = [&](double mine) {  // "r0,r1,...": every rank's value, rounded
    const Tensor all = ops::empty({p}, {DType::kF64});
    world.all_gather(all, ops::scalar_tensor(mine, {DType::kF64})).wait();
    std::string out;
    for (int r = 0; r < p; ++r) out += str_cat(r ? "," : "", int(all.data<double>()[r] + 0.5));
    return out;
  };
  const std::string act_mb = per_rank(median(act)), cpu_ms = per_rank(median(cpu_s) * 1e3);
  const double step = median(step_s);
  if (world.rank() == 0)
    std::printf(
        "spmd-pp schedule=%s m=%d stages=%d tokens_per_s=%.0f step_ms=%.1f bubble=%.3f "
        "predicted=%.3f in_flight=%d act_mb=%s cpu_ms=%s best_step_ms=%.1f peak_rss_mb=%.1f\n",
        name.c_str(), m, world.size(), double(f.batch * c.max_seq_len) / step, step * 1e3,
        bubble.item<double>(), pp::predicted_bubble(kind, p, m, v),
        *std::max_element(sim.peak_in_flight.begin(), sim.peak_in_flight.end()), act_mb.c_str(),
        cpu_ms.c_str(), *std::min_element(step_s.begin(), step_s.end()) * 1e3, peak_rss_mb());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"Pipeline-parallel training of the small transformer (CPU); see pp_bench.py."};
  app.add_flag("--single", f.single, "one process, no pipeline: the reference");
  app.add_option("--schedules", f.schedules, "comma-separated: gpipe, 1f1b, interleaved, zbh1");
  app.add_option("--stages-per-rank", f.stages_per_rank, "the interleaved schedule's stages a rank")
      ->check(CLI::PositiveNumber);
  app.add_option("--microbatches", f.microbatches, "comma-separated microbatch counts");
  app.add_option("--threads", f.threads, "CPU threads per rank")
      ->check(spmd::flags::count(1, 1024));
  app.add_option("--steps", f.steps, "timed steps")->check(spmd::flags::count(1));
  app.add_option("--warmup", f.warmup, "untimed steps first")->check(spmd::flags::count(0));
  app.add_option("--batch", f.batch, "sequences per step")->check(spmd::flags::count(1));
  CLI11_PARSE(app, argc, argv);
  try {
    set_num_threads(f.threads);
    if (f.single) {
      run_single(f);
      return 0;
    }
    auto world = dist::init_process_group();  // env://, the TCP backend
    for (const std::string& name : split(f.schedules))
      for (const std::string& m : split(f.microbatches))
        run_pipeline(*world, name, std::stoi(m), f);
    dist::destroy_process_group(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spmd-bench-pp: %s\n", e.what());
    return 1;
  }
  return 0;
}
