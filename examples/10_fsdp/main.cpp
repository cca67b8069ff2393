// 10_fsdp: 05_ddp's data-parallel training with the model state sharded
// (chapter 16.7). DDP keeps a whole copy of the parameters, their gradients
// and AdamW's two moments on every rank: 16 bytes a parameter. Here
// dist::fully_shard cuts every parameter along dim 0 over the N ranks, so a
// rank holds, updates and saves 1/N of each. A unit (each TransformerBlock,
// then the root with the embeddings and the final norm) is all_gathered just
// before it computes and freed right after; its gradients are
// reduce_scattered: each rank receives the average of its own rows only.
// The loop is 05_ddp's. The last step's numbers show what changes: each
// rank's bytes beside DDP's, the allocator's peak, the most the units held
// unsharded at once, and the collectives beside DDP's one all_reduce. At the
// end the whole model is gathered (full_state_dict); --save writes it.
// Not here: HSDP, FSDP with tensor parallelism, gradient accumulation.
//
//   spmdrun --standalone --nproc-per-node 2 10_fsdp --data docs/architecture.md
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "autograd/autograd.h"
#include "autograd/data/text_dataset.h"
#include "autograd/nn/memory_estimate.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "autograd/optim/lr_schedule.h"
#include "autograd/train_loop.h"
#include "examples/common/flags.h"
#include "parallel/comm/init.h"
#include "parallel/device_mesh.h"
#include "parallel/fsdp/fully_shard.h"
#include "parallel/fsdp/state_dict.h"
#include "parallel/placement.h"
#include "parallel/sampler.h"
#include "runtime/flag_checks.h"
#include "runtime/resource_limits.h"
#include "tensor/cpu/allocator.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;

namespace {

constexpr int64_t kSeqLen = 64;   // T
constexpr double kMaxNorm = 1.0;  // the global gradient norm is clipped to this
constexpr uint64_t kSeed = 1337;  // of the weights and of the sampler

struct Flags {
  std::string data, save;
  int64_t steps = 20, batch = 2, layers = 4, d_model = 256, warmup = 5, log_every = 5;
  double lr = 5e-4;
  bool prefetch = true, reshard_after_forward = true, bf16 = false;
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  examples::Cli cli("Train the transformer fully sharded (run it under spmdrun).");
  cli.data(f.data).steps(f.steps).batch(f.batch, "sequences per rank per step");
  cli.lr(f.lr).warmup(f.warmup).log_every(f.log_every);
  CLI::App& app = cli.app();
  app.add_option("--layers", f.layers, "transformer blocks")->check(spmd::flags::count(1));
  app.add_option("--d-model", f.d_model, "width C (heads of 32)")->check(spmd::flags::count(1));
  app.add_flag("--prefetch,!--no-prefetch", f.prefetch, "gather the next unit while one computes");
  app.add_flag("--reshard-after-forward,!--no-reshard-after-forward", f.reshard_after_forward,
               "free each block after its forward and gather it again for backward");
  app.add_flag("--bf16", f.bf16, "gather and compute in bf16, reduce gradients in f32");
  app.add_option("--save", f.save, "write the gathered model to this safetensors file");
  cli.parse(argc, argv);
  return f;
}

// Every block its own unit, then the root for what is left (embeddings, norm).
std::shared_ptr<dist::FsdpModule> shard(const std::shared_ptr<nn::Transformer>& model,
                                        const dist::DeviceMesh& mesh, const Flags& f) {
  dist::FsdpOptions options;
  options.reshard_after_forward = f.reshard_after_forward;
  options.prefetch = f.prefetch;
  if (f.bf16) options.mixed_precision = {.param_dtype = DType::kBF16, .reduce_dtype = DType::kF32};
  for (size_t i = 0; i < model->layers->size(); ++i)
    dist::fully_shard(model->layers->at(i), mesh, options);
  return dist::fully_shard(model, mesh, options);
}

double mb(double bytes) { return bytes / 1e6; }

// One rank's bytes in the step just taken (before zero_grad): its shards,
// their gradients, AdamW's moments, the allocator's peak, and the most the
// units held unsharded at once (FsdpModule::peak_unsharded_bytes).
std::vector<double> measure(const std::vector<Tensor>& params, const optim::AdamW& opt,
                            const dist::FsdpModule& root) {
  std::vector<double> m(5, 0.0);
  for (const Tensor& p : params) {
    m[0] += double(p.nbytes());
    if (p.grad().defined()) m[1] += double(p.grad().nbytes());
  }
  for (const auto& [name, t] : opt.state_dict()) m[2] += double(t.nbytes());
  m[3] = double(cpu::host_memory_stats().peak_allocated);
  m[4] = double(root.peak_unsharded_bytes());
  return m;
}

// Rank 0 prints every rank's bytes (gathered, so in rank order) above what
// DDP holds of the same f32 model, then the step's collectives beside DDP's
// one all_reduce of every gradient.
void report(dist::ProcessGroup& world, const std::vector<double>& mine, double whole, double block,
            const dist::CommStats& comm) {
  const int n = world.size();
  const Tensor all = ops::empty({n, 5}, {DType::kF64});
  world.all_gather(all, ops::from_vector(mine, {5})).wait();
  if (world.rank() != 0) return;
  std::printf(
      "MB per rank      params   grads  AdamW state  model state  step peak  unsharded peak\n");
  for (int r = 0; r < n; ++r) {
    const double* v = all.data<double>() + 5 * r;
    std::printf("rank %-11d %7.2f %7.2f %12.2f %12.2f %10.2f %15.2f\n", r, mb(v[0]), mb(v[1]),
                mb(v[2]), mb(v[0] + v[1] + v[2]), mb(v[3]), mb(v[4]));
  }
  std::printf("DDP (computed)   %7.2f %7.2f %12.2f %12.2f   (one block's parameters: %.2f)\n",
              mb(whole), mb(whole), mb(2 * whole), mb(4 * whole), mb(block));
  const auto& ag = comm[dist::OpType::kAllGather];
  const auto& rs = comm[dist::OpType::kReduceScatter];
  const double fsdp = double(ag.bytes + rs.bytes), ring = double(n - 1) / n;
  std::printf(
      "per step: all_gather %llu calls %.2f MB, reduce_scatter %llu calls %.2f MB; "
      "DDP: all_reduce 1 x %.2f MB\n",
      (unsigned long long)ag.calls, mb(double(ag.bytes)), (unsigned long long)rs.calls,
      mb(double(rs.bytes)), mb(whole));
  std::printf("sent per rank as a ring sends: FSDP %.2f MB, DDP %.2f MB (%.2fx)\n", mb(ring * fsdp),
              mb(2 * ring * whole), fsdp / (2 * whole));
}

// Gathers every tensor whole (collective: every rank calls it) and, with a
// path, writes them from rank 0, then loads the file into a plain model.
void save_full_state_dict(const nn::Transformer& model, bool lead, const std::string& path) {
  const TensorMap full = dist::full_state_dict(model);
  if (!lead) return;
  double bytes = 0;
  for (const auto& [name, t] : full) bytes += double(t.nbytes());
  std::printf("full state dict on rank 0: %zu tensors, %.2f MB\n", full.size(), mb(bytes));
  if (path.empty()) return;
  save_safetensors(path, full);
  nn::Transformer(model.config).load(path);  // strict: every name and shape of a plain model
  std::printf("saved to %s; a plain Transformer loads it\n", path.c_str());
}

void train(const std::shared_ptr<dist::ProcessGroup>& world, const Flags& f) {
  set_num_threads(1);  // the ranks share the cores
  const bool lead = world->rank() == 0;
  const data::TextDataset ds = data::TextDataset::from_file(f.data);
  const int64_t B = f.batch, T = kSeqLen, tokens_per_step = world->size() * B * T;
  const auto config = nn::TransformerConfig::gpt2(256, T, f.layers, f.d_model / 32, f.d_model);
  auto model = std::make_shared<nn::Transformer>(config, kSeed);  // the same on every rank
  check_memory_fits(str_cat("training with --batch ", B, " per rank"),
                    nn::training_step_bytes_lower_bound(
                        config, model->num_parameters() / world->size(), B));  // sharded
  const double whole = 4.0 * double(model->num_parameters());                  // f32 bytes
  const double block = 4.0 * double(model->layers->at(0)->num_parameters());
  const dist::DeviceMesh mesh(world, {world->size()}, {"dp"});
  auto root = shard(model, mesh, f);
  const std::vector<Tensor> params = model->parameters();  // this rank's shards
  optim::AdamW opt(params, {.lr = f.lr, .weight_decay = 0.1});
  const optim::WarmupCosine schedule(f.lr, std::min(f.warmup, f.steps), f.steps, f.lr / 10);
  if (lead)
    std::printf("%d ranks, gpt2 %lld layers C %lld T %lld: %.0f parameters, %lld tokens per step\n",
                world->size(), (long long)f.layers, (long long)f.d_model, (long long)T, whole / 4,
                (long long)tokens_per_step);

  // This rank's windows of T + 1 tokens (window i starts at token i * T), as in 05_ddp.
  dist::DistributedSampler sampler((ds.size(data::Split::kTrain) - 1) / T, *world,
                                   /*shuffle=*/true, kSeed, /*drop_last=*/true);
  SPMD_CHECK(sampler.num_samples() >= B, "the text has only ", sampler.num_samples(),
             " windows per rank, fewer than a batch of ", B);
  std::vector<int64_t> order, starts;
  uint64_t epoch = 0;
  dist::ProcessGroup& dp = mesh.group("dp");  // where FSDP's collectives run
  dist::CommStats comm;
  std::vector<double> measured;
  LogWindow window(f.log_every, f.steps);  // autograd/train_loop.h, as in 01
  for (int64_t step = 0, pos = 0; step < f.steps; ++step) {
    if (pos + B > int64_t(order.size())) {  // a new epoch (the first too): a new shuffle
      sampler.set_epoch(epoch++);
      order = sampler.indices(), pos = 0;
    }
    starts.clear();
    for (int64_t b = 0; b < B; ++b) starts.push_back(order[size_t(pos++)] * T);
    const data::Batch batch = ds.batch_at(data::Split::kTrain, starts, T);
    cpu::reset_host_peak_memory();
    root->reset_peak_unsharded_bytes();
    dp.reset_stats();
    const Tensor loss = cross_entropy((*model)(batch.x), batch.y);  // logits (B, T, V)
    backward(loss);  // each unit's gradients reduce_scattered into its shards' .grad
    comm = dp.stats();
    dist::clip_grad_norm_(params, kMaxNorm);  // the shards' squares summed over dp
    opt.set_lr(schedule(step));
    opt.step();  // updates the shards only
    measured = measure(params, opt, *root);
    opt.zero_grad();

    if (window.end_step(step, tokens_per_step)) {  // the same steps on every rank
      Tensor mean_loss = ops::clone(detach(loss));
      world->all_reduce(mean_loss, dist::ReduceOp::kAvg).wait();  // for the log only
      const double tokens_per_s = window.tokens_per_second();
      if (lead)
        std::printf("step %lld loss %.4f tok/s %.0f (all ranks)\n", (long long)step,
                    mean_loss.item<double>(), tokens_per_s);
      std::fflush(stdout);
    }
  }
  report(*world, measured, whole, block, comm);
  save_full_state_dict(*model, lead, f.save);
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse_flags(argc, argv);
  try {
    auto world = dist::init_process_group();  // env://, the TCP backend
    train(world, flags);
    dist::destroy_process_group(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "10_fsdp: %s\n", e.what());
    return 1;
  }
  return 0;
}
