// run_training(): the loop of trainer.h, top to bottom.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/autograd.h"
#include "autograd/data/text_dataset.h"
#include "autograd/data/token_file.h"
#include "autograd/nn/memory_estimate.h"
#include "autograd/optim/adamw.h"
#include "autograd/optim/clip_grad.h"
#include "autograd/optim/lr_schedule.h"
#include "parallel/agreement.h"
#include "parallel/context_parallel/context_parallel.h"
#include "parallel/data_loader.h"
#include "parallel/ddp/gradient_average.h"
#include "parallel/placement.h"
#include "runtime/env.h"
#include "runtime/resource_limits.h"
#include "runtime/trace.h"
#include "tensor/cpu/allocator.h"
#include "tensor/cuda_api.h"
#include "tensor/ops.h"
#include "tensor/threads.h"
#include "train/flops.h"
#include "train/parallelize.h"
#include "train/pipeline_train.h"
#include "train/train_checkpoint.h"

namespace spmd::train {
namespace {

using Clock = std::chrono::steady_clock;

double schedule_lr(const TrainConfig& c, int64_t step) {
  const OptimizerConfig& o = c.optimizer;
  const ScheduleConfig& s = c.schedule;
  if (s.decay == "constant") {
    return step < s.warmup_steps ? o.lr * double(step + 1) / double(s.warmup_steps) : o.lr;
  }
  const optim::WarmupCosine schedule(o.lr, s.warmup_steps, c.training.steps, o.lr * s.min_lr_ratio,
                                     s.decay == "linear" ? optim::WarmupCosine::Decay::kLinear
                                                         : optim::WarmupCosine::Decay::kCosine);
  return schedule(step);
}

// Time this rank spent blocked in collectives since the groups' last reset.
double wait_ms(const std::vector<std::shared_ptr<dist::ProcessGroup>>& groups) {
  uint64_t ns = 0;
  for (const auto& g : groups)
    for (const auto& c : g->stats().by_op) ns += c.wait_ns;
  return double(ns) / 1e6;
}

// The loss of this rank's tokens (under context parallelism its chunks of
// each sequence), and the objective: the same plus, with experts,
// moe_aux_coef x the load-balancing loss.
struct Losses {
  Tensor loss, objective;
};
Losses loss_of(Parallelized& p, const ModelConfig& m, Tensor x, Tensor y) {
  if (p.cp->size() > 1) {
    x = dist::cp::shard_sequence(x, 1, *p.cp);
    y = dist::cp::shard_sequence(y, 1, *p.cp);
  }
  const Tensor logits = p.module()(x);
  const Tensor loss = lm_loss(logits, y, *p.tp);
  if (m.n_experts == 0) return {loss, loss};
  return {loss, add(loss, mul(nn::moe_aux_loss(*p.model), m.moe_aux_coef))};
}

// The held-out loss: the same windows on every rank (tp and FSDP ranks must
// all run each forward).
double val_loss(Parallelized& p, const ModelConfig& m, const data::TextDataset& ds, int64_t T,
                const Device& device) {
  NoGradGuard no_grad;
  const auto batches = ds.eval_batches(data::Split::kVal, 4, T, 4);
  double total = 0;
  for (const data::Batch& b : batches)
    total += loss_of(p, m, ops::to(b.x, device), ops::to(b.y, device)).loss.item<double>();
  Tensor mean =
      ops::scalar_tensor(batches.empty() ? 0.0 : total / double(batches.size()), {DType::kF64});
  if (p.cp->size() > 1)  // each cp rank saw its chunks: the sequence's loss is their mean
    p.cp->wait(p.cp->all_reduce(mean, dist::ReduceOp::kAvg), dist::OpType::kAllReduce);
  return mean.item<double>();
}

// The text's bytes, or a BPE token file's tokens (data.tokenizer).
data::TextDataset load_dataset(const TrainConfig& c) {
  if (c.data.tokenizer == "byte") {
    const std::string path = c.data.path.empty() ? SPMD_EMBEDDED_TEXT : c.data.path;
    return data::TextDataset::from_file(path, c.data.eval_fraction);
  }
  data::TokenFile file = data::read_token_file(c.data.path);
  int64_t needed = file.vocab_size;  // 0 in llm.c's files: the largest token's id + 1
  for (int64_t t : file.tokens) needed = std::max(needed, file.vocab_size > 0 ? 0 : t + 1);
  SPMD_CHECK(needed <= c.model.vocab_size, "model.vocab_size ", c.model.vocab_size,
             " is less than the vocabulary of ", c.data.path, " (", needed,
             " tokens): set model.vocab_size to at least that");
  return data::TextDataset::from_tokens(std::move(file.tokens), c.data.eval_fraction);
}

// This rank's allocator: the host's, or the GPU's caching allocator.
struct Memory {
  int64_t allocated, peak;
};
Memory memory_stats(const Device& device) {
  if (device.is_cuda())
    return {int64_t(cuda::memory_allocated(device.index)),
            int64_t(cuda::max_memory_allocated(device.index))};
  const auto m = cpu::host_memory_stats();
  return {int64_t(m.allocated), int64_t(m.peak_allocated)};
}

void reset_peak_memory(const Device& device) {
  if (device.is_cuda()) {
    cuda::reset_peak_memory_stats(device.index);
  } else {
    cpu::reset_host_peak_memory();
  }
}

// Refuses, before any parameter moves, a step that cannot fit in this rank's
// memory: the lower bound of one micro-batch's step, split as evenly as tp,
// cp and pp could split it (each rank holds at least that share).
void check_fits(const TrainConfig& config, const nn::Transformer& model) {
  const ParallelConfig& p = config.parallel;
  const TrainingConfig& t = config.training;
  const int64_t rows = std::max<int64_t>(
      1, t.global_batch / (p.dp_replicate * p.dp_shard) / std::max<int64_t>(1, t.microbatches));
  const uint64_t whole =
      nn::training_step_bytes_lower_bound(model.config, model.num_parameters(), rows);
  check_memory_fits(str_cat("training.global_batch ", t.global_batch, " (", rows,
                            " rows per rank per micro-batch)"),
                    whole / uint64_t(std::max<int64_t>(1, p.tp * p.cp * p.pp)));
}

}  // namespace

dist::CommBackend comm_backend(const TrainConfig& config) {
  const std::string& b = config.parallel.backend;
  if (b == "nccl" || (b == "auto" && config.training.device == "cuda"))
    return dist::CommBackend::kNccl;
  return dist::CommBackend::kTcp;
}

Device training_device(const TrainConfig& config, int world_size) {
  if (config.training.device == "cpu") return Device::cpu();
  const int local = world_size == 1 ? 0 : launch_env_from_environment().local_rank;
  SPMD_CHECK(cuda::is_available(), "training.device = \"cuda\", but no GPU is visible here ",
             "(or spmd was built without CUDA)");
  SPMD_CHECK(local < cuda::device_count(), "training.device = \"cuda\": local rank ", local,
             " has no GPU of its own (", cuda::device_count(), " visible)");
  cuda::set_device(local);
  return Device::cuda(local);
}

TrainResult run_training(const TrainConfig& config,
                         const std::shared_ptr<dist::ProcessGroup>& world, int64_t stop_after) {
  const TrainingConfig& t = config.training;
  if (t.threads > 0) set_num_threads(t.threads);
  check_layout(config, world->size());
  // Every strategy below assumes the same config on every rank: checked once, here.
  dist::check_same_text_on_every_rank(*world, "the config", to_toml(config));
  SPMD_CHECK(config.optimizer.name == "adamw", "optimizer.name = \"", config.optimizer.name,
             "\": spmd-train steps with AdamW only");
  const bool lead = world->rank() == 0;

  // The layout, then the model on it.
  dist::DeviceMesh mesh = build_mesh(world, config.parallel);
  const Device device = training_device(config, world->size());
  auto model = std::make_shared<nn::Transformer>(transformer_config(config.model), t.seed);
  if (device.is_cuda()) {
    model->to(device);
  } else {
    check_fits(config, *model);  // the host's memory, which a CPU step uses
  }
  Parallelized par = parallelize(model, mesh, config);
  const NamedTensors named = par.named_parameters();
  std::vector<Tensor> params;
  for (const auto& [name, p] : named) params.push_back(p);
  optim::AdamW opt(params, {.lr = config.optimizer.lr,
                            .beta1 = config.optimizer.beta1,
                            .beta2 = config.optimizer.beta2,
                            .eps = config.optimizer.eps,
                            .weight_decay = config.optimizer.weight_decay});

  const data::TextDataset dataset = load_dataset(config);
  SPMD_CHECK(config.metrics.eval_every == 0 ||
                 !dataset.eval_batches(data::Split::kVal, 4, model->config.max_seq_len, 1).empty(),
             "metrics.eval_every = ", config.metrics.eval_every, " asks for held-out evals, but ",
             "data.eval_fraction = ", config.data.eval_fraction, " holds out ",
             dataset.size(data::Split::kVal), " tokens, fewer than one eval batch of 4 x ",
             model->config.max_seq_len + 1);
  const int64_t T = model->config.max_seq_len;
  dist::DataLoader loader(dataset, T, t.global_batch, par.dp_size, par.dp_rank, t.seed);

  TrainResult result;
  const CheckpointConfig& ck = config.checkpoint;
  if (!ck.folder.empty() && ck.resume) {
    const auto load_start = Clock::now();
    if (auto state = load_latest_checkpoint(ck.folder, named, opt, par.stage_replicas.get())) {
      result.first_step = state->step;
      loader.set_samples_consumed(state->samples_consumed);
      if (lead)
        std::printf("resumed from %s at step %lld (loaded in %.0f ms)\n", ck.folder.c_str(),
                    (long long)state->step,
                    std::chrono::duration<double>(Clock::now() - load_start).count() * 1e3);
    }
  }

  std::filesystem::create_directories(config.metrics.run_folder);
  std::ofstream metrics(
      config.metrics.run_folder + "/metrics_rank" + std::to_string(world->rank()) + ".jsonl",
      result.first_step > 0 ? std::ios::app : std::ios::trunc);
  const int64_t rows = t.global_batch / par.dp_size, mb = rows / t.microbatches;
  const double tokens_per_step = double(t.global_batch * T);
  // MFU: the model's FLOPs per step over what every rank's peak allows.
  const double peak = config.metrics.peak_tflops > 0 ? config.metrics.peak_tflops * 1e12
                                                     : measured_gemm_flops(device);
  const double flops_per_step = flops_per_token(model->config) * tokens_per_step;
  if (lead)
    std::printf(
        "mfu against %.1f GFLOP/s per rank (%s), %.2f MFLOP per token\n", peak / 1e9,
        config.metrics.peak_tflops > 0 ? "metrics.peak_tflops" : "an f32 GEMM, measured here",
        flops_per_token(model->config) / 1e6);

  const int64_t last = stop_after >= 0 ? std::min(stop_after, t.steps) : t.steps;
  for (int64_t step = result.first_step; step < last; ++step) {
    const auto start = Clock::now();
    manual_seed(t.seed * 1000003 + uint64_t(step));  // dropout: the same masks after a resume
    for (const auto& g : par.groups) g->reset_stats();
    reset_peak_memory(device);
    opt.zero_grad();
    data::Batch batch = loader.next();
    batch.x = ops::to(batch.x, device), batch.y = ops::to(batch.y, device);
    double loss_sum = 0;
    if (par.pipeline) {  // each microbatch a pipeline step; the stages' gradients averaged after
      for (int64_t m = 0; m < t.microbatches; ++m) {
        Tensor x = ops::narrow(batch.x, 0, m * mb, mb), y = ops::narrow(batch.y, 0, m * mb, mb);
        if (par.cp->size() > 1)  // the stages run on this rank's chunks of each sequence
          x = dist::cp::shard_sequence(x, 1, *par.cp), y = dist::cp::shard_sequence(y, 1, *par.cp);
        loss_sum += par.pipeline->step(x, y) / double(t.microbatches);  // NaN but on the last stage
      }
      reduce_stage_gradients(par);  // under FSDP: one reduce-scatter per unit per step
      dist::average_gradients(params, par.stage_average.get(), 1.0 / double(t.microbatches));
      for (const auto& st : par.stages) {  // experts: ep's averages, stage by stage
        if (!par.ep) break;
        if (par.fsdp_mesh) {  // FSDP averaged the dense gradients
          dist::ep::sync_expert_gradients(*st->as_module(), *par.ep);
        } else {
          dist::ep::sync_gradients(*st->as_module(), *par.ep);
        }
      }
      loss_sum = from_last_stage(loss_sum, par.stages.back()->is_last(), *par.pp);
    } else {
      for (int64_t m = 0; m < t.microbatches; ++m) {
        const bool sync = m + 1 == t.microbatches;  // gradients are reduced on the last only
        const Tensor x = ops::narrow(batch.x, 0, m * mb, mb),
                     y = ops::narrow(batch.y, 0, m * mb, mb);
        if (par.fsdp_root) par.fsdp_root->set_requires_gradient_sync(sync);
        Losses l;
        auto forward_backward = [&] {
          {
            TraceSpan span("forward");
            l = loss_of(par, config.model, x, y);
          }
          TraceSpan span("backward");
          backward(div(l.objective, double(t.microbatches)));
        };
        if (par.ddp && !sync) {
          auto local = par.ddp->no_sync();
          forward_backward();
        } else {
          forward_backward();
        }
        loss_sum += l.loss.item<double>() / double(t.microbatches);
      }
      if (par.ep && par.fsdp_root) {  // FSDP averaged the dense gradients
        dist::ep::sync_expert_gradients(*model, *par.ep);
      } else if (par.ep) {
        dist::ep::sync_gradients(*model, *par.ep);
      }
    }
    TraceSpan optimizer_span("optimizer step");  // the gradient norm, clipping, AdamW
    const double grad_norm =
        par.pipeline ? pipeline_grad_norm(params, *par.pp) : dist::grad_norm(params);
    if (t.grad_clip > 0) optim::clip_grads_with_norm_(params, t.grad_clip, grad_norm);
    const double lr = schedule_lr(config, step);
    opt.set_lr(lr);
    opt.step();
    optimizer_span.end();

    // The loss of the whole global batch: the mean over the dp (and cp) ranks.
    Tensor mean = ops::scalar_tensor(loss_sum, {DType::kF64});
    if (par.loss_group->size() > 1)
      par.loss_group->wait(par.loss_group->all_reduce(mean, dist::ReduceOp::kAvg),
                           dist::OpType::kAllReduce);
    const double loss = mean.item<double>();
    result.losses.push_back(loss);
    const double step_s = std::chrono::duration<double>(Clock::now() - start).count();
    const Memory mem = memory_stats(device);
    nlohmann::json line = {{"step", step},
                           {"loss", loss},
                           {"grad_norm", grad_norm},
                           {"lr", lr},
                           {"tokens_per_s", tokens_per_step / step_s},
                           {"mfu", flops_per_step / step_s / (peak * world->size())},
                           {"step_ms", step_s * 1e3},
                           {"comm_wait_ms", wait_ms(par.groups)},
                           {"mem_allocated", mem.allocated},
                           {"mem_peak", mem.peak}};
    const bool eval = config.metrics.eval_every > 0 && (step + 1) % config.metrics.eval_every == 0;
    if (eval)
      line["val_loss"] = par.pipeline ? pipeline_val_loss(par, dataset, T, device)
                                      : val_loss(par, config.model, dataset, T, device);
    const bool save_now =
        !ck.folder.empty() &&
        ((ck.interval > 0 && (step + 1) % ck.interval == 0) || step + 1 == t.steps);
    if (save_now) {
      const auto save_start = Clock::now();
      save_checkpoint(ck.folder, {step + 1, loader.samples_consumed(), lr}, named, opt, *world,
                      ck.keep, par.stage_replicas.get());
      line["checkpoint_ms"] =
          std::chrono::duration<double>(Clock::now() - save_start).count() * 1e3;
      line["checkpoint_bytes"] = checkpoint_bytes_of_rank(ck.folder, step + 1, world->rank());
    }
    metrics << line.dump() << "\n" << std::flush;
    if (lead && (step % config.metrics.log_every == 0 || step + 1 == t.steps || eval)) {
      std::printf(
          "step %5lld  loss %.4f  grad_norm %.3f  lr %.2e  %8.0f tok/s  mfu %4.1f%%  "
          "%.0f ms%s\n",
          (long long)step, loss, grad_norm, lr, tokens_per_step / step_s,
          100 * line["mfu"].get<double>(), step_s * 1e3,
          eval ? str_cat("  val_loss ", line["val_loss"].get<double>()).c_str() : "");
      std::fflush(stdout);
    }
  }
  return result;
}

void export_model(const TrainConfig& config, const std::string& out, bool with_logits) {
  SPMD_CHECK(!config.checkpoint.folder.empty(),
             "export: set checkpoint.folder to the run's folder");
  auto model =
      std::make_shared<nn::Transformer>(transformer_config(config.model), config.training.seed);
  optim::AdamW opt(model->parameters(), {});
  const auto state =
      load_latest_checkpoint(config.checkpoint.folder, model->named_parameters(), opt);
  SPMD_CHECK(state.has_value(), "export: ", config.checkpoint.folder,
             " holds no checkpoint (no latest)");
  model->save(out);
  std::printf("exported step %lld of %s to %s (%lld parameters)\n", (long long)state->step,
              config.checkpoint.folder.c_str(), out.c_str(), (long long)model->num_parameters());
  if (!with_logits) return;
  NoGradGuard no_grad;
  const int64_t T = model->config.max_seq_len, V = model->config.vocab_size;
  std::vector<int64_t> values(size_t(2 * T));
  for (size_t i = 0; i < values.size(); ++i) values[i] = int64_t(i * 7 % size_t(V));
  const Tensor ids = ops::from_vector(values, Shape{2, T});
  save_safetensors(out + ".logits.safetensors", {{"ids", ids}, {"logits", (*model)(ids)}});
}

}  // namespace spmd::train
