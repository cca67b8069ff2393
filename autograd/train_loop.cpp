// The shared pieces of the examples' training loops (see train_loop.h).
#include "autograd/train_loop.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "autograd/nn_functional.h"
#include "runtime/error.h"
#include "runtime/flag_checks.h"

namespace spmd {

optim::WarmupCosine TrainLoopFlags::schedule() const {
  return optim::WarmupCosine(lr, std::min(warmup, steps), steps, lr / 10);
}

void add_train_loop_flags(CLI::App& app, TrainLoopFlags& f, const std::string& batch_help) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // later wins
  app.add_option("--data", f.data, "text file to train on (the last 10% is held out)")->required();
  app.add_option("--config", f.config, "model size: tiny (0.8M parameters) or small (10.8M)")
      ->check(CLI::IsMember({"tiny", "small"}));
  app.add_option("--steps", f.steps, "optimizer steps")->check(flags::count(1));
  app.add_option("--batch", f.batch, batch_help)->check(flags::count(1));
  app.add_option("--lr", f.lr, "peak learning rate")->check(flags::positive());
  app.add_option("--warmup", f.warmup, "warm-up steps")->check(flags::count(0));
  app.add_option("--weight-decay", f.weight_decay, "AdamW weight decay")->check(flags::number(0));
  app.add_option("--grad-clip", f.grad_clip, "global gradient-norm limit (0: none)")
      ->check(flags::number(0));
  app.add_option("--seed", f.seed, "seed of the weights and of the batches");
  app.add_option("--threads", f.threads, "CPU threads per process")->check(flags::count(1, 1024));
  app.add_option("--log-every", f.log_every, "steps between log lines")->check(flags::count(1));
  app.add_option("--eval-batches", f.eval_batches, "held-out batches in the final val loss")
      ->check(flags::count(1));
}

double held_out_loss(nn::Module& model, const data::TextDataset& ds, int64_t B, int64_t T,
                     int64_t max_batches) {
  const auto batches = ds.eval_batches(data::Split::kVal, B, T, max_batches);
  SPMD_CHECK(!batches.empty(), "the held-out text is shorter than one batch of ", B, " x ", T + 1,
             " tokens: no val loss to report");
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  double total = 0;
  for (const data::Batch& b : batches) total += cross_entropy(model(b.x), b.y).item<double>();
  model.train(was_training);
  return total / double(batches.size());
}

bool LogWindow::end_step(int64_t step, int64_t tokens) {
  tokens_ += tokens;
  return step % log_every_ == 0 || step == steps_ - 1;
}

double LogWindow::tokens_per_second() {
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const double rate = seconds > 0 ? double(tokens_) / seconds : 0.0;
  start_ = now;
  tokens_ = 0;
  return rate;
}

}  // namespace spmd
