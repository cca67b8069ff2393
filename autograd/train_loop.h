// The small pieces of a training loop that the examples would otherwise each
// write again. 01_train_single and 05_ddp, whose loop is the same but for
// DDP, take all of them; 06-12, whose flags are each their chapter's own,
// take the log window:
//
//   TrainLoopFlags f;                       // --data --config --steps --batch ...
//   add_train_loop_flags(app, f, "sequences per rank");
//   const optim::WarmupCosine schedule = f.schedule();
//   LogWindow window(f.log_every, f.steps);
//   for (step...) { ...; if (window.end_step(step, tokens)) print(window.tokens_per_second()); }
//   double val = held_out_loss(model, ds, f.batch, T, f.eval_batches);
//
// Not here: the model, the optimizer and the data order (each example's
// lesson), and spmd-train's TOML config (train/config.h).
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <string>

#include "autograd/data/text_dataset.h"
#include "autograd/nn/module.h"
#include "autograd/optim/lr_schedule.h"

namespace spmd {

// The flags of a character-model training loop.
struct TrainLoopFlags {
  std::string data, config = "tiny";
  int64_t steps = 600, batch = 8, warmup = 50, log_every = 50, eval_batches = 20;
  double lr = 2e-3, weight_decay = 0.1, grad_clip = 1.0;
  uint64_t seed = 1337;
  int threads = 1;

  // Linear warm-up for min(warmup, steps) steps, then cosine decay to lr / 10.
  optim::WarmupCosine schedule() const;
};

// Adds --data (required), --config, --steps, --batch (described by
// `batch_help`), --lr, --warmup, --weight-decay, --grad-clip, --seed,
// --threads, --log-every and --eval-batches to `app`, each checked
// (runtime/flag_checks.h), the last of a repeated flag winning.
void add_train_loop_flags(CLI::App& app, TrainLoopFlags& f, const std::string& batch_help);

// The mean loss over up to `max_batches` consecutive batches of B windows
// of the held-out text: in eval mode (restored afterwards) and without a
// graph. Throws InvalidArgument when the held-out text is shorter than
// one batch.
double held_out_loss(nn::Module& model, const data::TextDataset& ds, int64_t B, int64_t T,
                     int64_t max_batches);

// The log line's window: which steps log (every log_every-th from step 0,
// and the last), and the tokens per second since the previous log line.
class LogWindow {
 public:
  LogWindow(int64_t log_every, int64_t steps) : log_every_(log_every), steps_(steps) {}
  // Counts `tokens` for `step`; true when the step is one to log.
  bool end_step(int64_t step, int64_t tokens);
  // The tokens per second of the window, and a new window from now.
  double tokens_per_second();

 private:
  int64_t log_every_, steps_, tokens_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace spmd
