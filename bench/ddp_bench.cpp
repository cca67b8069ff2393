// spmd-bench-ddp: tokens per second of data-parallel GPT-2 training (f32,
// CPU, the TCP backend), and how much of the gradient all_reduce was hidden
// behind backward. Run it under spmdrun, one process per rank:
//
//   spmdrun --standalone --nproc-per-node 2 spmd-bench-ddp --config small --threads 1
//
// Each rank trains its own random byte tokens (drawn before the clock
// starts) with DistributedDataParallel (25 MiB buckets, the first 1 MiB, as
// PyTorch) and AdamW (lr 3e-4, weight decay 0.1). A step is forward, backward
// (the reducer's all_reduces overlap it and its end waits for them), and the
// optimizer step; the median step time over --steps steps after --warmup
// untimed ones. Rank 0 prints one line in spmd-bench-train's format:
//   spmd-ddp config=small world=2 threads=1 params=... tokens_per_s=... step_ms=...
//   comm_ms=... exposed_ms=... hidden_share=... span_ms=... span_hidden_share=...
//   peak_rss_mb=...
// tokens_per_s counts every rank's tokens. comm_ms is the communicator's busy
// time on the buckets per step (dist::SyncTimeline::comm_us), exposed_ms the
// part of it after backward's last node, hidden_share the rest's share.
// span_ms and span_hidden_share measure as PyTorch's DDP statistics do
// (avg_backward_comm_time, avg_backward_compute_comm_overlap_time): the span
// from the first bucket's launch to the last one's completion, and the part
// of that span before backward's last node, idle gaps included.
// bench/ddp_bench.py runs it beside PyTorch DDP (bench/peers/torch_ddp.py).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "bench/step_stats.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/ddp.h"
#include "runtime/flag_checks.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;

namespace {

using bench::median;
using bench::peak_rss_mb;

struct Flags {
  std::string config = "small";
  int threads = 1;
  int steps = 10;
  int warmup = 2;
  int64_t batch = 8;
  double bucket_cap_mb = 25;
};

void run(const std::shared_ptr<dist::ProcessGroup>& world, const Flags& f) {
  set_num_threads(f.threads);
  const nn::TransformerConfig config = nn::TransformerConfig::preset(f.config);
  auto model = std::make_shared<nn::Transformer>(config, 0);
  dist::DistributedDataParallel ddp(model, world, {.bucket_cap_mb = f.bucket_cap_mb});
  optim::AdamW opt(ddp.parameters(), {.lr = 3e-4, .weight_decay = 0.1});
  const int64_t B = f.batch, T = config.max_seq_len;
  Generator gen(1 + uint64_t(world->rank()));  // each rank its own data
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < f.warmup + f.steps; ++i) {
    xs.push_back(ops::randint(0, config.vocab_size, {B, T}, {DType::kI64}, &gen));
    ys.push_back(ops::randint(0, config.vocab_size, {B, T}, {DType::kI64}, &gen));
  }
  std::vector<double> step_s, comm_ms, exposed_ms, hidden, span_ms, span_hidden;
  for (int i = 0; i < f.warmup + f.steps; ++i) {
    world->barrier().wait();  // start the ranks' steps together
    const auto start = std::chrono::steady_clock::now();
    const Tensor loss = cross_entropy(ddp(xs[size_t(i)]), ys[size_t(i)]);
    opt.zero_grad();
    backward(loss);
    opt.step();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i < f.warmup) continue;
    const dist::SyncTimeline& t = ddp.last_sync();
    step_s.push_back(seconds);
    comm_ms.push_back(double(t.comm_us()) / 1e3);
    exposed_ms.push_back(double(t.comm_us() - t.hidden_us()) / 1e3);
    hidden.push_back(t.hidden_share());
    const int64_t first = t.buckets.front().launch_us, last = t.buckets.back().done_us;
    span_ms.push_back(double(last - first) / 1e3);
    span_hidden.push_back(double(std::min(t.compute_end_us, last) - first) /
                          double(std::max<int64_t>(1, last - first)));
  }
  const double step = median(step_s);
  if (world->rank() == 0)
    std::printf(
        "spmd-ddp config=%s world=%d threads=%d params=%lld tokens_per_s=%.0f step_ms=%.1f "
        "comm_ms=%.1f exposed_ms=%.1f hidden_share=%.3f span_ms=%.1f span_hidden_share=%.3f "
        "peak_rss_mb=%.1f\n",
        f.config.c_str(), world->size(), f.threads, (long long)model->num_parameters(),
        double(world->size() * B * T) / step, step * 1e3, median(comm_ms), median(exposed_ms),
        median(hidden), median(span_ms), median(span_hidden), peak_rss_mb());
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"Tokens per second of DDP training of GPT-2 (f32, CPU); run under spmdrun."};
  app.add_option("--config", f.config, "tiny or small")->check(CLI::IsMember({"tiny", "small"}));
  app.add_option("--threads", f.threads, "CPU threads per rank")
      ->check(spmd::flags::count(1, 1024));
  app.add_option("--steps", f.steps, "timed steps")->check(spmd::flags::count(1));
  app.add_option("--warmup", f.warmup, "untimed steps first")->check(spmd::flags::count(0));
  app.add_option("--batch", f.batch, "sequences per rank")->check(spmd::flags::count(1));
  app.add_option("--bucket-cap-mb", f.bucket_cap_mb, "DDP bucket size")
      ->check(spmd::flags::positive());
  CLI11_PARSE(app, argc, argv);
  try {
    auto world = dist::init_process_group();  // env://, the TCP backend
    run(world, f);
    dist::destroy_process_group(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spmd-bench-ddp: %s\n", e.what());
    return 1;
  }
  return 0;
}
