// spmd-bench-fsdp: FSDP GPT-2 training on CPU ranks (the TCP backend),
// beside DDP on the same ranks, batch and model. Run it under spmdrun:
//
//   spmdrun --standalone --nproc-per-node 2 spmd-bench-fsdp --mode fsdp --config small
//
// Modes, for a global batch of --batch sequences per step (batch/N per rank):
//   ddp   DistributedDataParallel;
//   fsdp  every TransformerBlock a unit, then the root; --no-prefetch and
//         --keep-after-forward (reshard_after_forward false) change how.
// A step is forward, backward and the AdamW step; the median over --steps
// steps after --warmup untimed ones. Rank 0 prints one line:
//   spmd-fsdp mode=fsdp prefetch=1 reshard=1 config=small world=2 threads=1
//   tokens_per_s=... step_ms=... state_peak_bytes=... step_peak_bytes=...
//   activation_bytes=... comm_ms=... hidden_share=... param_bytes=...
// state_peak_bytes: the allocator's peak over a step of a 4-token batch,
//   where activations are negligible: parameters, gradients, optimizer state
//   and FSDP's gathered buffers (DDP's buckets). step_peak_bytes: the peak
//   over a step of the real batch; activation_bytes the difference.
// comm_ms / hidden_share: time per step the collectives ran (from issue, or
//   the previous one's end, to completion) and the share of it during which
//   the training thread was not waiting on them.
// bench/fsdp_bench.py runs the modes side by side.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "bench/step_stats.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/ddp.h"
#include "parallel/device_mesh.h"
#include "parallel/fsdp/fully_shard.h"
#include "runtime/flag_checks.h"
#include "tensor/cpu/allocator.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;

namespace {

using bench::median;

struct Flags {
  std::string mode = "fsdp", config = "small";
  bool no_prefetch = false, keep_after_forward = false;
  int threads = 1, steps = 6, warmup = 2;
  int64_t batch = 8;
};

// Collective time and the part of it the training thread did not wait on,
// from one step's FSDP timeline: collectives of one group run one after
// another, so each runs from max(issue, the previous one's end) to its end.
std::pair<double, double> comm_and_hidden_ms(const std::vector<dist::FsdpUnitTimes>& units) {
  std::vector<dist::CommTimes> all;
  for (const auto& u : units) {
    all.insert(all.end(), u.gathers.begin(), u.gathers.end());
    all.insert(all.end(), u.reduces.begin(), u.reduces.end());
  }
  std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.issue_us < b.issue_us; });
  int64_t busy = 0, waited = 0, prev_done = 0;
  for (const auto& c : all) {
    busy += std::max<int64_t>(0, c.done_us - std::max(c.issue_us, prev_done));
    prev_done = std::max(prev_done, c.done_us);
    waited += c.wait_us;
  }
  return {busy / 1e3, std::max<int64_t>(0, busy - waited) / 1e3};
}

void run(const std::shared_ptr<dist::ProcessGroup>& world, const Flags& f) {
  set_num_threads(f.threads);
  const nn::TransformerConfig config = nn::TransformerConfig::preset(f.config);
  auto model = std::make_shared<nn::Transformer>(config, 0);
  const int n = world->size();
  SPMD_CHECK(f.batch % n == 0, "--batch ", f.batch, " does not divide among ", n, " ranks");
  std::shared_ptr<dist::DistributedDataParallel> ddp;
  std::shared_ptr<dist::FsdpModule> root;
  if (f.mode == "ddp") {
    ddp = std::make_shared<dist::DistributedDataParallel>(model, world);
  } else {
    dist::DeviceMesh mesh(world, {n}, {"dp_shard"});
    dist::FsdpOptions o;
    o.reshard_after_forward = !f.keep_after_forward;
    o.prefetch = !f.no_prefetch;
    for (size_t i = 0; i < model->layers->size(); ++i)
      dist::fully_shard(model->layers->at(i), mesh, o);
    root = dist::fully_shard(model, mesh, o);
  }
  nn::Module& m = ddp ? static_cast<nn::Module&>(*ddp) : *model;
  uint64_t param_bytes = 0;
  for (const Tensor& p : m.parameters()) param_bytes += p.nbytes();
  optim::AdamW opt(m.parameters(), {.lr = 3e-4, .weight_decay = 0.1});
  const int64_t B = f.batch / n, T = config.max_seq_len;
  Generator gen(1 + uint64_t(world->rank()));
  auto step = [&](const Tensor& x) {
    backward(cross_entropy(m(x), x));
    opt.step();
    opt.zero_grad();
  };
  std::vector<double> step_s, comm_ms, hidden_ms;
  size_t step_peak = 0;
  for (int i = 0; i < f.warmup + f.steps; ++i) {
    const Tensor x = ops::randint(0, config.vocab_size, {B, T}, {DType::kI64}, &gen);
    world->barrier().wait();  // start the ranks' steps together
    cpu::reset_host_peak_memory();
    const auto start = std::chrono::steady_clock::now();
    step(x);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i < f.warmup) continue;
    step_s.push_back(seconds);
    step_peak = std::max(step_peak, cpu::host_memory_stats().peak_allocated);
    if (root) {
      const auto [busy, hidden] = comm_and_hidden_ms(root->timeline());
      comm_ms.push_back(busy), hidden_ms.push_back(hidden);
    } else {
      const dist::SyncTimeline& t = ddp->last_sync();
      comm_ms.push_back(t.comm_us() / 1e3), hidden_ms.push_back(t.hidden_us() / 1e3);
    }
  }
  // The model state's peak: the same step on 4 tokens.
  const Tensor tiny = ops::randint(0, config.vocab_size, {1, 4}, {DType::kI64}, &gen);
  size_t state_peak = 0;
  for (int i = 0; i < 2; ++i) {
    cpu::reset_host_peak_memory();
    step(tiny);
    state_peak = cpu::host_memory_stats().peak_allocated;
  }
  const double s = median(step_s), c = median(comm_ms), h = median(hidden_ms);
  if (world->rank() == 0)
    std::printf(
        "spmd-fsdp mode=%s prefetch=%d reshard=%d config=%s world=%d threads=%d "
        "tokens_per_s=%.0f step_ms=%.1f state_peak_bytes=%zu step_peak_bytes=%zu "
        "activation_bytes=%zu comm_ms=%.1f hidden_share=%.3f param_bytes=%llu\n",
        f.mode.c_str(), int(!f.no_prefetch), int(!f.keep_after_forward), f.config.c_str(), n,
        f.threads, double(f.batch * T) / s, s * 1e3, state_peak, step_peak,
        step_peak > state_peak ? step_peak - state_peak : 0, c, c > 0 ? h / c : 1.0,
        (unsigned long long)param_bytes);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"FSDP GPT-2 training beside DDP (CPU ranks); see fsdp_bench.py."};
  app.add_option("--mode", f.mode, "ddp or fsdp")->check(CLI::IsMember({"ddp", "fsdp"}));
  app.add_flag("--no-prefetch", f.no_prefetch, "fsdp: gather each unit only when it runs");
  app.add_flag("--keep-after-forward", f.keep_after_forward,
               "fsdp: reshard_after_forward false (keep units gathered until backward)");
  app.add_option("--config", f.config, "tiny or small")->check(CLI::IsMember({"tiny", "small"}));
  app.add_option("--threads", f.threads, "CPU threads per rank")
      ->check(spmd::flags::count(1, 1024));
  app.add_option("--steps", f.steps, "timed steps")->check(spmd::flags::count(1));
  app.add_option("--warmup", f.warmup, "untimed steps first")->check(spmd::flags::count(0));
  app.add_option("--batch", f.batch, "sequences per step, all ranks together")
      ->check(spmd::flags::count(1));
  CLI11_PARSE(app, argc, argv);
  try {
    auto world = dist::init_process_group({});
    run(world, f);
    dist::destroy_process_group(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spmd-bench-fsdp: %s\n", e.what());
    return 1;
  }
  return 0;
}
