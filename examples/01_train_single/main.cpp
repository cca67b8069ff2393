// 01_train_single: train a GPT-2-shaped character model on a text file, in
// one process, with no parallelism: the baseline every later example (DDP,
// pipeline, tensor parallel...) is compared against.
//
// The loop is the one every trainer runs:
//   sample a batch -> forward -> loss -> backward -> clip -> AdamW step
// with a linear warm-up then cosine decay of the learning rate, a log line
// every --log-every steps, and at the end the loss on held-out text. The
// flags, the schedule, the log window and the held-out loss are the
// library's (autograd/train_loop.h), shared with the distributed examples.
//
//   01_train_single --data ../shared/data/tinyshakespeare.txt --config tiny --steps 600
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
#include "runtime/resource_limits.h"
#include "tensor/threads.h"

using namespace spmd;

namespace {

TrainLoopFlags parse_flags(int argc, char** argv) {
  TrainLoopFlags f;
  examples::Cli cli("Train a GPT-2-shaped character model on one text file, in one process.");
  add_train_loop_flags(cli.app(), f, "sequences per batch");
  cli.parse(argc, argv);
  return f;
}

void train(const TrainLoopFlags& f) {
  set_num_threads(f.threads);
  const data::TextDataset ds = data::TextDataset::from_file(f.data);
  nn::TransformerConfig config = nn::TransformerConfig::preset(f.config);
  nn::Transformer model(config, f.seed);
  const int64_t B = f.batch, T = config.max_seq_len;
  check_memory_fits(str_cat("training with --batch ", B, " (config ", f.config, ")"),
                    nn::training_step_bytes_lower_bound(config, model.num_parameters(), B));
  std::printf("config %s: %lld parameters, batch %lld x %lld tokens, %lld train / %lld val bytes\n",
              f.config.c_str(), (long long)model.num_parameters(), (long long)B, (long long)T,
              (long long)ds.size(data::Split::kTrain), (long long)ds.size(data::Split::kVal));

  const std::vector<Tensor> params = model.parameters();
  optim::AdamW opt(params, {.lr = f.lr, .weight_decay = f.weight_decay});
  const optim::WarmupCosine schedule = f.schedule();
  Generator batches(f.seed + 1);
  LogWindow window(f.log_every, f.steps);

  for (int64_t step = 0; step < f.steps; ++step) {
    const data::Batch batch = ds.sample(data::Split::kTrain, B, T, batches);
    const Tensor loss = cross_entropy(model(batch.x), batch.y);  // logits (B, T, V)
    opt.zero_grad();
    backward(loss);
    if (f.grad_clip > 0) optim::clip_grad_norm_(params, f.grad_clip);
    opt.set_lr(schedule(step));
    opt.step();

    if (window.end_step(step, B * T)) {
      std::printf("step %lld loss %.4f tok/s %.0f\n", (long long)step, loss.item<double>(),
                  window.tokens_per_second());
      std::fflush(stdout);
    }
  }
  std::printf("val loss %.4f\n", held_out_loss(model, ds, B, T, f.eval_batches));
}

}  // namespace

int main(int argc, char** argv) {
  const TrainLoopFlags flags = parse_flags(argc, argv);
  try {
    train(flags);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "01_train_single: %s\n", e.what());
    return 1;
  }
  return 0;
}
