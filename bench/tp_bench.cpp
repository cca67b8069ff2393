// spmd-bench-tp: tensor-parallel GPT-2 training on CPU ranks (the TCP
// backend), beside the two runs it is weighed against: one process training
// the same batch, and DDP on the same ranks. Run it under spmdrun:
//
//   spmdrun --standalone --nproc-per-node 2 spmd-bench-tp --mode tp --config small
//   spmd-bench-tp --mode single --config small          (one process, no launcher)
//
// Modes, for a global batch of --batch sequences per step:
//   single  one process trains the whole batch;
//   ddp     each of the N ranks trains batch/N sequences, gradients all-reduced;
//   tp      every rank trains the whole batch on 1/N of each block's weights
//           (tp::parallelize_transformer), the loss vocab-parallel; --sp adds
//           sequence parallelism.
// A step is forward, backward and the AdamW step; the median over --steps
// steps after --warmup untimed ones. Rank 0 prints one line:
//   spmd-tp mode=tp sp=0 config=small world=2 threads=1 tokens_per_s=... step_ms=...
//   comm_wait_ms=... param_bytes=... unsplit_param_bytes=... tp_bytes=... formula_bytes=...
//   peak_rss_mb=...
// comm_wait_ms: the time per step this rank was blocked in tensor
// parallelism's collectives (ProcessGroup::stats()'s wait_ns); the rest of
// the step is compute. tp_bytes: the payload bytes the tp group carried in
// one step, formula_bytes what tp::transformer_tp_comm_per_step says.
// bench/tp_bench.py runs the modes side by side.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "bench/step_stats.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/ddp.h"
#include "parallel/device_mesh.h"
#include "parallel/tensor_parallel/loss.h"
#include "parallel/tensor_parallel/plan.h"
#include "runtime/env.h"
#include "runtime/flag_checks.h"
#include "runtime/hash_store.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;
namespace tp = dist::tp;

namespace {

using bench::median;
using bench::peak_rss_mb;

struct Flags {
  std::string mode = "tp", config = "small";
  bool sp = false;
  int threads = 1, steps = 6, warmup = 2;
  int64_t batch = 8;
};

uint64_t param_bytes(const nn::Module& m) {
  uint64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.nbytes();
  return n;
}

uint64_t wait_ns(const dist::CommStats& s) {
  uint64_t n = 0;
  for (const auto& c : s.by_op) n += c.wait_ns;
  return n;
}

void run(const std::shared_ptr<dist::ProcessGroup>& world, const Flags& f) {
  set_num_threads(f.threads);
  const nn::TransformerConfig config = nn::TransformerConfig::preset(f.config);
  auto model = std::make_shared<nn::Transformer>(config, 0);
  const uint64_t unsplit_bytes = param_bytes(*model);
  const int n = world->size();
  SPMD_CHECK(f.mode != "single" || n == 1, "--mode single runs on one rank, not ", n);
  SPMD_CHECK(f.mode != "ddp" || f.batch % n == 0, "--batch ", f.batch, " does not divide among ", n,
             " DDP ranks");
  dist::DeviceMesh mesh(world, {n}, {"tp"});
  std::shared_ptr<dist::DistributedDataParallel> ddp;
  if (f.mode == "tp") tp::parallelize_transformer(*model, mesh, f.sp);
  if (f.mode == "ddp") ddp = std::make_shared<dist::DistributedDataParallel>(model, world);
  optim::AdamW opt(model->parameters(), {.lr = 3e-4, .weight_decay = 0.1});
  const int64_t B = f.mode == "ddp" ? f.batch / n : f.batch, T = config.max_seq_len;
  // The same global batch on every rank (DDP ranks take their rows of it).
  Generator gen(1);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < f.warmup + f.steps; ++i) {
    Tensor x = ops::randint(0, config.vocab_size, {f.batch, T}, {DType::kI64}, &gen);
    Tensor y = ops::randint(0, config.vocab_size, {f.batch, T}, {DType::kI64}, &gen);
    const int64_t first = f.mode == "ddp" ? world->rank() * B : 0;
    xs.push_back(ops::contiguous(ops::narrow(x, 0, first, B)));
    ys.push_back(ops::contiguous(ops::narrow(y, 0, first, B)));
  }
  dist::ProcessGroup& tp_group = mesh.group("tp");
  std::vector<double> step_s, wait_ms;
  uint64_t tp_bytes = 0;
  for (int i = 0; i < f.warmup + f.steps; ++i) {
    world->barrier().wait();  // start the ranks' steps together
    tp_group.reset_stats();
    const auto start = std::chrono::steady_clock::now();
    Tensor loss;
    if (f.mode == "tp") {
      loss = tp::vocab_parallel_cross_entropy((*model)(xs[size_t(i)]), ys[size_t(i)], tp_group);
    } else {
      loss = cross_entropy(ddp ? (*ddp)(xs[size_t(i)]) : (*model)(xs[size_t(i)]), ys[size_t(i)]);
    }
    opt.zero_grad();
    backward(loss);
    const dist::CommStats stats = tp_group.stats();  // before the optimizer (no collectives)
    opt.step();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i < f.warmup) continue;
    step_s.push_back(seconds);
    wait_ms.push_back(double(wait_ns(stats)) / 1e6);
    tp_bytes = stats.total_bytes() - stats[dist::OpType::kBarrier].bytes;
  }
  const uint64_t formula =
      f.mode == "tp" ? tp::transformer_tp_comm_per_step(config, B, T, f.sp).total_bytes() : 0;
  const double step = median(step_s);
  if (world->rank() == 0)
    std::printf(
        "spmd-tp mode=%s sp=%d config=%s world=%d threads=%d tokens_per_s=%.0f step_ms=%.1f "
        "comm_wait_ms=%.1f param_bytes=%llu unsplit_param_bytes=%llu tp_bytes=%llu "
        "formula_bytes=%llu peak_rss_mb=%.1f\n",
        f.mode.c_str(), int(f.sp), f.config.c_str(), n, f.threads, double(f.batch * T) / step,
        step * 1e3, f.mode == "tp" ? median(wait_ms) : 0.0, (unsigned long long)param_bytes(*model),
        (unsigned long long)unsplit_bytes, (unsigned long long)(f.mode == "tp" ? tp_bytes : 0),
        (unsigned long long)formula, peak_rss_mb());
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"Tensor-parallel GPT-2 training beside one process and DDP (CPU); see tp_bench.py."};
  app.add_option("--mode", f.mode, "single, ddp or tp")
      ->check(CLI::IsMember({"single", "ddp", "tp"}));
  app.add_flag("--sp", f.sp, "tp: sequence parallelism too");
  app.add_option("--config", f.config, "tiny or small")->check(CLI::IsMember({"tiny", "small"}));
  app.add_option("--threads", f.threads, "CPU threads per rank")
      ->check(spmd::flags::count(1, 1024));
  app.add_option("--steps", f.steps, "timed steps")->check(spmd::flags::count(1));
  app.add_option("--warmup", f.warmup, "untimed steps first")->check(spmd::flags::count(0));
  app.add_option("--batch", f.batch, "sequences per step, all ranks together")
      ->check(spmd::flags::count(1));
  CLI11_PARSE(app, argc, argv);
  try {
    dist::InitOptions init;
    if (!launched()) {  // --mode single without a launcher (spmdrun, mpirun, srun)
      init.store = std::make_shared<HashStore>();
      init.world_size = 1, init.rank = 0;
    }
    auto world = dist::init_process_group(init);
    run(world, f);
    dist::destroy_process_group(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spmd-bench-tp: %s\n", e.what());
    return 1;
  }
  return 0;
}
