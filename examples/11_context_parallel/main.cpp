// 11_context_parallel: a long sequence split across the ranks (chapter
// 16.8.1). Data parallelism splits the batch, tensor parallelism and FSDP the
// model; here every rank of the cp group reads the same sequences and keeps
// T/cp tokens of each: chunks r and 2cp-1-r of 2cp (cp::shard_sequence), so
// that under the causal mask every rank has the same work.
// cp::parallelize_context makes each block's attention ring attention: the
// keys and values travel the ring, one rank's pair per step, and each rank
// merges its queries' partial results. Everything else in the model is per
// token and runs on the local tokens. DDP over the cp group averages the
// gradients, which gives the gradient of the whole sequence's mean loss.
// First rank 0 takes the same step on the whole sequence in one process (its
// loss is the one cp must give, its memory the one cp divides); then the
// group trains and the last step is measured: the tokens each rank holds,
// its activation memory, the attention blocks it computed (2cp+1 per call on
// every rank) and the bytes the ring moved beside the formula's.
// Not here: rotary positions (refused), variable-length documents, dp x cp.
//
//   spmdrun --standalone --nproc-per-node 2 11_context_parallel --data docs/architecture.md
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/data/text_dataset.h"
#include "autograd/nn/memory_estimate.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "autograd/train_loop.h"
#include "examples/common/flags.h"
#include "parallel/comm/init.h"
#include "parallel/context_parallel/context_parallel.h"
#include "parallel/context_parallel/ring_attention.h"
#include "parallel/ddp/ddp.h"
#include "parallel/device_mesh.h"
#include "runtime/flag_checks.h"
#include "runtime/resource_limits.h"
#include "tensor/cpu/allocator.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;
namespace cp = dist::cp;

namespace {

constexpr uint64_t kSeed = 1337;  // of the weights and of the batches

struct Flags {
  std::string data;  // empty: random tokens
  int64_t steps = 10, batch = 2, seq_len = 512, layers = 2, d_model = 128, log_every = 3;
  double lr = 1e-3;
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  examples::Cli cli("Train the transformer with its sequence split over the ranks (spmdrun).");
  cli.steps(f.steps).batch(f.batch, "sequences per step (the same on every rank)");
  cli.lr(f.lr, "learning rate").log_every(f.log_every);
  CLI::App& app = cli.app();
  app.add_option("--data", f.data, "text file to train on (default: random tokens)");
  app.add_option("--seq-len", f.seq_len, "T, split into 2 x cp chunks")
      ->check(spmd::flags::count(1));
  app.add_option("--layers", f.layers, "transformer blocks")->check(spmd::flags::count(1));
  app.add_option("--d-model", f.d_model, "width C (heads of 32)")->check(spmd::flags::count(1));
  cli.parse(argc, argv);
  return f;
}

// B windows of T + 1 tokens: of the text, or random bytes. Every rank draws
// from a generator of the same seed, so the cp group reads the same batch.
data::Batch next_batch(const std::optional<data::TextDataset>& ds, int64_t B, int64_t T,
                       Generator& gen) {
  if (ds) return ds->sample(data::Split::kTrain, B, T, gen);
  const Tensor w = ops::randint(0, 256, {B, T + 1}, {DType::kI64}, &gen);
  return {ops::contiguous(ops::narrow(w, 1, 0, T)), ops::contiguous(ops::narrow(w, 1, 1, T))};
}

// One forward and backward, measured by the allocator: what the forward
// leaves alive (the activations saved for backward, and the loss) and the
// peak of the whole step (with backward's temporaries and the gradients),
// both above what was allocated before the step.
struct Step {
  Tensor loss;
  double saved = 0, peak = 0;
};
Step measured_step(nn::Module& model, const Tensor& x, const Tensor& y) {
  const double before = double(cpu::host_memory_stats().allocated);
  cpu::reset_host_peak_memory();
  Step s;
  s.loss = cross_entropy(model(x), y);  // the mean over the tokens given
  s.saved = double(cpu::host_memory_stats().allocated) - before;
  backward(s.loss);
  s.peak = double(cpu::host_memory_stats().peak_allocated) - before;
  return s;
}

double mb(double bytes) { return bytes / 1e6; }

// Rank 0 prints every rank's numbers of the last step (gathered, in rank
// order) under the whole sequence's, then the ring's bytes beside the formula.
// mine: tokens, saved and peak bytes, blocks, bytes sent, received, all_reduced.
void report(dist::ProcessGroup& group, const std::vector<double>& mine, const Step& whole,
            const nn::TransformerConfig& config, int64_t B) {
  const int64_t n = group.size(), T = config.max_seq_len, L = config.n_layers, k = 7;
  const Tensor all = ops::empty({n, k}, {DType::kF64});
  group.all_gather(all, ops::from_vector(mine, {k})).wait();
  if (group.rank() != 0) return;
  std::printf(
      "per step         tokens  saved MB  peak MB  attention blocks  ring sent MB  received MB\n");
  std::printf("whole, 1 process %6lld %9.2f %8.2f %17lld\n", (long long)(B * T), mb(whole.saved),
              mb(whole.peak), (long long)(L * n * (2 * n + 1)));
  for (int64_t r = 0; r < n; ++r) {
    const double* v = all.data<double>() + k * r;
    std::printf("rank %-11lld %6.0f %9.2f %8.2f %17.0f %13.2f %12.2f\n", (long long)r, v[0],
                mb(v[1]), mb(v[2]), v[3], mb(v[4]), mb(v[5]));
  }
  const double* v0 = all.data<double>();
  std::printf(
      "blocks per attention call: %.0f on every rank (2 cp + 1 = %lld) of the %lld that "
      "causal attention over 2 cp chunks has\n",
      v0[3] / double(L), (long long)(2 * n + 1), (long long)(n * (2 * n + 1)));
  // Per block and rank: forward passes keys and values (2 tensors) cp - 1
  // times; backward keys and values cp - 1 times and their gradients' (2)
  // accumulator cp times; each (B, H, T/cp, D) in f32, which is B x T/cp x C
  // floats.
  const double formula =
      double(L * (2 * (n - 1) + 2 * (n - 1) + 2 * n) * B * (T / n) * config.d_model * 4);
  std::printf("ring sent %.0f bytes per rank per step, %s %.0f; DDP's all_reduce %.2f MB\n", v0[4],
              v0[4] == formula ? "as the formula says:" : "but the formula says", formula,
              mb(v0[6]));
}

void train(const std::shared_ptr<dist::ProcessGroup>& world, const Flags& f) {
  set_num_threads(1);  // the ranks share the cores
  const bool lead = world->rank() == 0;
  const int64_t B = f.batch, T = f.seq_len, n = world->size();
  SPMD_CHECK(n >= 2,
             "context parallelism splits the sequence over the ranks: run 2 or more "
             "(spmdrun --nproc-per-node 2)");
  const auto config = nn::TransformerConfig::gpt2(256, T, f.layers, f.d_model / 32, f.d_model);
  // Rank 0's reference step holds the whole sequence; each cp rank T/cp of it.
  check_memory_fits(str_cat("training with --batch ", B, " and --seq-len ", T),
                    nn::training_step_bytes_lower_bound(
                        config, nn::Transformer(config, kSeed).num_parameters(), B));
  std::optional<data::TextDataset> ds;
  if (!f.data.empty()) ds = data::TextDataset::from_file(f.data);
  Generator batches(kSeed + 1);  // the same on every rank: the same sequences
  Generator peek(kSeed + 1);     // the first batch again, for the reference step
  Step whole;  // rank 0's reference: the first batch, whole, through a plain model
  if (lead) {
    nn::Transformer plain(config, kSeed);  // the weights the cp ranks start from
    const data::Batch b = next_batch(ds, B, T, peek);
    whole = measured_step(plain, b.x, b.y);
  }

  const dist::DeviceMesh mesh(world, {n}, {"cp"});
  dist::ProcessGroup& group = mesh.group("cp");
  auto model = std::make_shared<nn::Transformer>(config, kSeed);
  cp::parallelize_context(*model, mesh.group_ptr("cp"));  // ring attention, global positions
  dist::DistributedDataParallel ddp(model, mesh.group_ptr("cp"));  // gradients: mean over cp
  optim::AdamW opt(ddp.parameters(), {.lr = f.lr, .weight_decay = 0.1});
  if (lead)
    std::printf(
        "cp = %lld, gpt2 %lld layers C %lld T %lld: %lld parameters; %lld of %lld tokens "
        "per rank\n",
        (long long)n, (long long)f.layers, (long long)f.d_model, (long long)T,
        (long long)model->num_parameters(), (long long)(B * T / n), (long long)(B * T));

  std::vector<double> measured;
  LogWindow window(f.log_every, f.steps);  // autograd/train_loop.h, as in 01
  for (int64_t step = 0; step < f.steps; ++step) {
    const data::Batch b = next_batch(ds, B, T, batches);
    const Tensor x = cp::shard_sequence(b.x, 1, group);  // (B, T/cp): chunks r and 2cp-1-r
    const Tensor y = cp::shard_sequence(b.y, 1, group);
    group.reset_stats();
    const int64_t blocks_before = cp::ring_attention_blocks();
    const Step s = measured_step(ddp, x, y);  // dK, dV travel home; DDP averages the gradients
    const dist::CommStats comm = group.stats();
    // In report()'s order: tokens, saved, peak, blocks, sent, received, all_reduced.
    measured = {double(x.numel()),
                s.saved,
                s.peak,
                double(cp::ring_attention_blocks() - blocks_before),
                double(comm[dist::OpType::kSend].bytes),
                double(comm[dist::OpType::kRecv].bytes),
                double(comm[dist::OpType::kAllReduce].bytes)};
    opt.step();
    opt.zero_grad();

    if (window.end_step(step, B * T)) {          // the same steps on every rank
      Tensor mean = ops::clone(detach(s.loss));  // equal token counts: the whole sequence's mean
      group.all_reduce(mean, dist::ReduceOp::kAvg).wait();
      const double tokens_per_s = window.tokens_per_second();
      if (lead) {
        std::printf("step %lld loss %.4f tok/s %.0f (the group's)", (long long)step,
                    mean.item<double>(), tokens_per_s);
        if (step == 0)
          std::printf("; the whole sequence in one process: %.4f (difference %.1g)",
                      whole.loss.item<double>(),
                      std::abs(whole.loss.item<double>() - mean.item<double>()));
        std::printf("\n");
      }
      std::fflush(stdout);
    }
  }
  report(group, measured, whole, config, B);
  const cp::RingTransferStats t = cp::ring_transfers();
  for (const auto& [pass, x] : {std::pair{"forward", t.forward}, std::pair{"backward", t.backward}})
    if (lead && x.transfer_us > 0)
      std::printf(
          "%s's ring transfers (rank 0, %lld of them): %.1f ms in flight, %.1f ms waited "
          "after the blocks: %.0f%% hidden behind compute\n",
          pass, (long long)x.transfers, double(x.transfer_us) / 1e3, double(x.wait_us) / 1e3,
          100.0 * (1.0 - double(x.wait_us) / double(x.transfer_us)));
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse_flags(argc, argv);
  try {
    auto world = dist::init_process_group();  // env://, the TCP backend
    train(world, flags);
    dist::destroy_process_group(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "11_context_parallel: %s\n", e.what());
    return 1;
  }
  return 0;
}
