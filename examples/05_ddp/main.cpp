// 05_ddp: 01_train_single's transformer, trained data-parallel (chapter
// 16.4). Two pieces turn the one-process loop into an N-process one:
//   - dist::DataLoader (parallel/data_loader.h) deals each rank its own
//     disjoint shard of the text's windows as a DistributedSampler does,
//     reshuffled every epoch;
//   - dist::DistributedDataParallel wraps the model: it broadcasts rank 0's
//     weights at construction and averages the gradients during backward,
//     bucket by bucket, overlapping the all_reduces with the rest of backward.
// The loop itself is unchanged: forward, backward, clip, AdamW step (its
// flags, schedule, log window and held-out loss are 01's, from
// autograd/train_loop.h). With --grad-accum K, K micro-batches accumulate
// gradients under no_sync() and only the last backward communicates.
//
//   spmdrun --standalone --nproc-per-node 2 05_ddp --data ../shared/data/tinyshakespeare.txt
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "autograd/autograd.h"
#include "autograd/data/text_dataset.h"
#include "autograd/nn/memory_estimate.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "autograd/optim/clip_grad.h"
#include "autograd/train_loop.h"
#include "examples/common/flags.h"
#include "parallel/comm/init.h"
#include "parallel/data_loader.h"
#include "parallel/ddp/ddp.h"
#include "runtime/flag_checks.h"
#include "runtime/resource_limits.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;

namespace {

struct Flags {
  TrainLoopFlags loop;  // --data --config --steps --batch --lr ... (autograd/train_loop.h)
  int64_t grad_accum = 1;
  double bucket_cap_mb = 25;
  bool bf16_grads = false;
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  examples::Cli cli("Train the transformer with DistributedDataParallel (run it under spmdrun).");
  CLI::App& app = cli.app();
  add_train_loop_flags(app, f.loop, "sequences per rank per micro-batch");
  app.add_option("--grad-accum", f.grad_accum, "micro-batches per step")
      ->check(spmd::flags::count(1));
  app.add_option("--bucket-cap-mb", f.bucket_cap_mb, "DDP gradient bucket size")
      ->check(spmd::flags::positive());
  app.add_flag("--bf16-grads", f.bf16_grads, "compress gradients to bf16 on the wire");
  cli.parse(argc, argv);
  return f;
}

void train(const std::shared_ptr<dist::ProcessGroup>& group, const Flags& flags) {
  const TrainLoopFlags& f = flags.loop;
  dist::ProcessGroup& world = *group;
  set_num_threads(f.threads);
  const bool lead = world.rank() == 0;
  const data::TextDataset ds = data::TextDataset::from_file(f.data);
  auto model = std::make_shared<nn::Transformer>(nn::TransformerConfig::preset(f.config), f.seed);
  check_memory_fits(
      str_cat("training with --batch ", f.batch, " per rank (config ", f.config, ")"),
      nn::training_step_bytes_lower_bound(model->config, model->num_parameters(), f.batch));
  dist::DistributedDataParallel ddp(model, group, {.bucket_cap_mb = flags.bucket_cap_mb});
  if (flags.bf16_grads) ddp.register_comm_hook(dist::bf16_compress_hook);
  const int64_t B = f.batch, T = model->config.max_seq_len, K = flags.grad_accum;
  const int64_t tokens_per_step = world.size() * K * B * T;
  if (lead)
    std::printf("%d ranks, config %s: %lld parameters in %zu buckets, %lld tokens per step\n",
                world.size(), f.config.c_str(), (long long)model->num_parameters(),
                ddp.bucket_parameter_names().size(), (long long)tokens_per_step);

  const std::vector<Tensor> params = ddp.parameters();
  optim::AdamW opt(params, {.lr = f.lr, .weight_decay = f.weight_decay});
  const optim::WarmupCosine schedule = f.schedule();
  // Each micro-batch: B windows per rank, the ranks' shards disjoint
  // (a DistributedSampler's deal, reshuffled every epoch; checks that every
  // rank passes the same seed and sizes).
  dist::DataLoader batches(ds, T, world.size() * B, world, f.seed);
  LogWindow window(f.log_every, f.steps);
  for (int64_t step = 0; step < f.steps; ++step) {
    opt.zero_grad();
    Tensor loss;
    for (int64_t micro = 0; micro < K; ++micro) {
      const data::Batch b = batches.next();
      if (micro + 1 < K) {
        auto local = ddp.no_sync();  // accumulate only; the last micro-batch averages the sums
        backward(div(cross_entropy(ddp(b.x), b.y), double(K)));
      } else {
        loss = cross_entropy(ddp(b.x), b.y);  // logits (B, T, V)
        backward(div(loss, double(K)));       // the gradients are averaged here
      }
    }
    if (f.grad_clip > 0) optim::clip_grad_norm_(params, f.grad_clip);  // the same on every rank
    opt.set_lr(schedule(step));
    opt.step();

    if (window.end_step(step, tokens_per_step)) {  // the same steps on every rank
      Tensor mean_loss = ops::clone(detach(loss));
      world.all_reduce(mean_loss, dist::ReduceOp::kAvg).wait();  // for the log only
      const double tokens_per_s = window.tokens_per_second();
      if (lead)
        std::printf("step %lld loss %.4f tok/s %.0f (all ranks) all_reduce hidden %.0f%%\n",
                    (long long)step, mean_loss.item<double>(), tokens_per_s,
                    100 * ddp.last_sync().hidden_share());
      std::fflush(stdout);
    }
  }
  const double val = held_out_loss(*model, ds, B, T, f.eval_batches);  // identical on every rank
  if (lead) std::printf("val loss %.4f\n", val);
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse_flags(argc, argv);
  try {
    auto world = dist::init_process_group();  // env://, the TCP backend
    train(world, flags);
    dist::destroy_process_group(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "05_ddp: %s\n", e.what());
    return 1;
  }
  return 0;
}
