// 05_ddp: 01_train_single's transformer, trained data-parallel (chapter
// 16.4). Two pieces turn the one-process loop into an N-process one:
//   - dist::DistributedSampler gives each rank its own disjoint shard of the
//     text's windows, reshuffled every epoch;
//   - dist::DistributedDataParallel wraps the model: it broadcasts rank 0's
//     weights at construction and averages the gradients during backward,
//     bucket by bucket, overlapping the all_reduces with the rest of backward.
// The loop itself is unchanged: forward, backward, clip, AdamW step. With
// --grad-accum K, K micro-batches accumulate gradients under no_sync() and
// only the last backward communicates.
//
//   spmdrun --standalone --nproc-per-node 2 05_ddp --data ../shared/data/tinyshakespeare.txt
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <string>

#include "autograd/autograd.h"
#include "autograd/data/text_dataset.h"
#include "autograd/nn/memory_estimate.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "autograd/optim/clip_grad.h"
#include "autograd/optim/lr_schedule.h"
#include "parallel/comm/init.h"
#include "parallel/ddp.h"
#include "parallel/sampler.h"
#include "runtime/flag_checks.h"
#include "runtime/resource_limits.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;

namespace {

struct Flags {
  std::string data, config = "tiny";
  int64_t steps = 600, batch = 8, grad_accum = 1, warmup = 50, log_every = 50, eval_batches = 20;
  double lr = 2e-3, grad_clip = 1.0, bucket_cap_mb = 25;
  uint64_t seed = 1337;
  int threads = 1;
  bool bf16_grads = false;
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  CLI::App app{"Train the transformer with DistributedDataParallel (run it under spmdrun)."};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // later wins
  app.add_option("--data", f.data, "text file to train on (the last 10% is held out)")->required();
  app.add_option("--config", f.config, "tiny or small")->check(CLI::IsMember({"tiny", "small"}));
  app.add_option("--steps", f.steps, "optimizer steps")->check(spmd::flags::count(1));
  app.add_option("--batch", f.batch, "sequences per rank per micro-batch")
      ->check(spmd::flags::count(1));
  app.add_option("--grad-accum", f.grad_accum, "micro-batches per step")
      ->check(spmd::flags::count(1));
  app.add_option("--lr", f.lr, "peak learning rate")->check(spmd::flags::positive());
  app.add_option("--warmup", f.warmup, "warm-up steps")->check(spmd::flags::count(0));
  app.add_option("--grad-clip", f.grad_clip, "global gradient-norm limit (0: none)")
      ->check(spmd::flags::number(0));
  app.add_option("--bucket-cap-mb", f.bucket_cap_mb, "DDP gradient bucket size")
      ->check(spmd::flags::positive());
  app.add_flag("--bf16-grads", f.bf16_grads, "compress gradients to bf16 on the wire");
  app.add_option("--seed", f.seed, "seed of the weights and of the sampler");
  app.add_option("--threads", f.threads, "CPU threads per rank")
      ->check(spmd::flags::count(1, 1024));
  app.add_option("--log-every", f.log_every, "steps between log lines")
      ->check(spmd::flags::count(1));
  app.add_option("--eval-batches", f.eval_batches, "held-out batches in the final val loss")
      ->check(spmd::flags::count(1));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  return f;
}

// This rank's batches: the training text cut into windows of T + 1 tokens
// (window i starts at token i * T), dealt by a DistributedSampler.
class ShardedBatches {
 public:
  ShardedBatches(const data::TextDataset& ds, int64_t B, int64_t T, dist::ProcessGroup& world,
                 uint64_t seed)
      : ds_(ds),
        B_(B),
        T_(T),
        sampler_((ds.size(data::Split::kTrain) - 1) / T, world, /*shuffle=*/true, seed,
                 /*drop_last=*/true) {  // checks that every rank passes the same seed and sizes
    SPMD_CHECK(sampler_.num_samples() >= B, "the training text has only ", sampler_.num_samples(),
               " windows per rank, fewer than a batch of ", B);
  }
  data::Batch next() {
    if (pos_ + B_ > int64_t(indices_.size())) {  // a new epoch: a new shuffle
      sampler_.set_epoch(epoch_++);
      indices_ = sampler_.indices();
      pos_ = 0;
    }
    std::vector<int64_t> starts;
    for (int64_t b = 0; b < B_; ++b) starts.push_back(indices_[size_t(pos_++)] * T_);
    return ds_.batch_at(data::Split::kTrain, starts, T_);
  }

 private:
  const data::TextDataset& ds_;
  int64_t B_, T_;
  dist::DistributedSampler sampler_;
  std::vector<int64_t> indices_;
  int64_t pos_ = 0;
  uint64_t epoch_ = 0;
};

double val_loss(nn::Module& model, const data::TextDataset& ds, int64_t B, int64_t T, int64_t n) {
  NoGradGuard no_grad;
  double total = 0;
  const auto batches = ds.eval_batches(data::Split::kVal, B, T, n);
  SPMD_CHECK(!batches.empty(), "the held-out text is shorter than one batch of ", B, " x ", T + 1,
             " tokens: no val loss to report");
  for (const data::Batch& b : batches) total += cross_entropy(model(b.x), b.y).item<double>();
  return total / double(batches.size());
}

void train(const std::shared_ptr<dist::ProcessGroup>& group, const Flags& f) {
  dist::ProcessGroup& world = *group;
  set_num_threads(f.threads);
  const bool lead = world.rank() == 0;
  const data::TextDataset ds = data::TextDataset::from_file(f.data);
  auto model = std::make_shared<nn::Transformer>(nn::TransformerConfig::preset(f.config), f.seed);
  check_memory_fits(
      str_cat("training with --batch ", f.batch, " per rank (config ", f.config, ")"),
      nn::training_step_bytes_lower_bound(model->config, model->num_parameters(), f.batch));
  dist::DistributedDataParallel ddp(model, group, {.bucket_cap_mb = f.bucket_cap_mb});
  if (f.bf16_grads) ddp.register_comm_hook(dist::bf16_compress_hook);
  const int64_t B = f.batch, T = model->config.max_seq_len;
  const int64_t tokens_per_step = world.size() * f.grad_accum * B * T;
  if (lead)
    std::printf("%d ranks, config %s: %lld parameters in %zu buckets, %lld tokens per step\n",
                world.size(), f.config.c_str(), (long long)model->num_parameters(),
                ddp.bucket_parameter_names().size(), (long long)tokens_per_step);

  const std::vector<Tensor> params = ddp.parameters();
  optim::AdamW opt(params, {.lr = f.lr, .weight_decay = 0.1});
  const optim::WarmupCosine schedule(f.lr, std::min(f.warmup, f.steps), f.steps, f.lr / 10);
  ShardedBatches batches(ds, B, T, world, f.seed);
  auto window_start = std::chrono::steady_clock::now();
  for (int64_t step = 0, window_steps = 0; step < f.steps; ++step) {
    opt.zero_grad();
    Tensor loss;
    for (int64_t micro = 0; micro < f.grad_accum; ++micro) {
      const data::Batch b = batches.next();
      if (micro + 1 < f.grad_accum) {
        auto local = ddp.no_sync();  // accumulate only; the last micro-batch averages the sums
        backward(div(cross_entropy(ddp(b.x), b.y), double(f.grad_accum)));
      } else {
        loss = cross_entropy(ddp(b.x), b.y);        // logits (B, T, V)
        backward(div(loss, double(f.grad_accum)));  // the gradients are averaged here
      }
    }
    if (f.grad_clip > 0) optim::clip_grad_norm_(params, f.grad_clip);  // the same on every rank
    opt.set_lr(schedule(step));
    opt.step();

    ++window_steps;
    if (step % f.log_every == 0 || step == f.steps - 1) {
      Tensor mean_loss = ops::clone(detach(loss));
      world.all_reduce(mean_loss, dist::ReduceOp::kAvg).wait();  // for the log only
      const auto now = std::chrono::steady_clock::now();
      const double seconds = std::chrono::duration<double>(now - window_start).count();
      if (lead)
        std::printf("step %lld loss %.4f tok/s %.0f (all ranks) all_reduce hidden %.0f%%\n",
                    (long long)step, mean_loss.item<double>(),
                    double(window_steps * tokens_per_step) / seconds,
                    100 * ddp.last_sync().hidden_share());
      std::fflush(stdout);
      window_start = std::chrono::steady_clock::now();
      window_steps = 0;
    }
  }
  const double val = val_loss(*model, ds, B, T, f.eval_batches);  // identical on every rank
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
