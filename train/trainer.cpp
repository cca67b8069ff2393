// run_training(): the loop of trainer.h, top to bottom.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "autograd/autograd.h"
#include "autograd/data/text_dataset.h"
#include "autograd/optim/adamw.h"
#include "autograd/optim/lr_schedule.h"
#include "parallel/data_loader.h"
#include "runtime/env.h"
#include "runtime/resource_limits.h"
#include "runtime/trace.h"
#include "tensor/cpu/allocator.h"
#include "tensor/cpu/bf16_gemm.h"
#include "tensor/cpu/blas.h"
#include "tensor/cpu/capability.h"
#include "tensor/cuda_api.h"
#include "tensor/ops.h"
#include "tensor/threads.h"
#include "train/async_checkpoint.h"
#include "train/hf_gpt2.h"
#include "train/memory_plan.h"
#include "train/metrics.h"
#include "train/nonfinite.h"
#include "train/parallelize.h"
#include "train/run_checks.h"
#include "train/train_checkpoint.h"
#include "train/trained_model.h"

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

// The model from the seed as names and shapes on the meta device, with no
// bytes: parallelize() lays it out and gives each rank's pieces theirs.
std::shared_ptr<nn::Transformer> build_model(const TrainConfig& config) {
  DefaultDeviceGuard meta(Device::meta());
  return std::make_shared<nn::Transformer>(transformer_config(config.model), config.training.seed);
}

// The step the latest checkpoint ends at, its state loaded into the
// model, the optimizer and the data order; 0 without one (or without
// checkpoint.resume).
// The checkpoint must hold exactly the model's tensors (every stage's: the
// names come from the model built on meta), unless
// checkpoint.allow_partial_load.
// A checkpoint one rank refuses (a damaged or non-finite piece of its own)
// stops every rank (refuse_together).
int64_t resume(const TrainConfig& config, Parallelized& par, dist::DataLoader& loader,
               dist::ProcessGroup& world) {
  const CheckpointConfig& ck = config.checkpoint;
  if (ck.folder.empty() || !ck.resume) return 0;
  const bool lead = world.rank() == 0;
  const auto start = Clock::now();
  LoadCheck check{{}, ck.allow_partial_load};
  for (const auto& [name, p] : build_model(config)->named_parameters())
    check.whole_model.push_back(name);
  std::string partial, refused;
  std::optional<TrainState> state;
  try {
    state = load_latest_checkpoint(ck.folder, par.named_parameters(), par.optimizer(),
                                   par.checkpoint_replicas(), check, &partial);
  } catch (const Error& e) {
    refused = e.what();
  }
  refuse_together(world, refused);
  if (!state) return 0;
  if (lead && !partial.empty()) std::printf("warning: %s\n", partial.c_str());
  loader.set_samples_consumed(state->samples_consumed);
  if (lead)
    std::printf("resumed from %s at step %lld (loaded in %.0f ms)\n", ck.folder.c_str(),
                (long long)state->step,
                std::chrono::duration<double>(Clock::now() - start).count() * 1e3);
  return state->step;
}

// model.init_from = "hf:PATH": the parameters this rank holds, filled
// from the Hugging Face GPT-2 folder PATH in place of the seed's values,
// each piece reading its own box of the file (train/hf_gpt2.h). Only a
// run that did not resume: a checkpoint holds the weights already trained
// from it. A folder one rank refuses stops every rank.
void init_from(const TrainConfig& config, Parallelized& par, dist::ProcessGroup& world,
               bool resumed) {
  const std::string& from = config.model.init_from;
  if (from.empty()) return;
  const bool lead = world.rank() == 0;
  if (resumed) {
    if (lead) std::printf("model.init_from = \"%s\" ignored: resumed\n", from.c_str());
    return;
  }
  const auto start = Clock::now();
  std::string refused;
  try {
    check_gpt2_shape(config.model, "model.init_from");
    load_hf_gpt2(hf_init_folder(from), config.model, build_model(config)->named_parameters(),
                 par.named_parameters());
  } catch (const Error& e) {
    refused = e.what();
  }
  refuse_together(world, refused);
  if (lead)
    std::printf("initialized from %s (loaded in %.0f ms)\n", from.c_str(),
                std::chrono::duration<double>(Clock::now() - start).count() * 1e3);
}

// Whether step (from 0) ends a period of `every` steps (0: never).
bool ends_period(int64_t step, int64_t every) { return every > 0 && (step + 1) % every == 0; }

// The state after `step` saved; its line (time, this rank's bytes) in the log.
// run_started: when this run began (wall clock, ns), to order its saves
// after an earlier run's in the same folder. With an AsyncCheckpointer the
// step stages the state and goes on, and the save's line is written when
// the save completes (at the next save, or the run's end: finish_async).
void save(const CheckpointConfig& ck, int64_t step, double lr, int64_t run_started,
          const Parallelized& par, const dist::DataLoader& loader, dist::ProcessGroup& world,
          MetricsLog& log, AsyncCheckpointer* async, double* stall_ms) {
  const TrainState state{step + 1, loader.samples_consumed(), lr, run_started};
  if (async != nullptr) {
    const double previous_stall = *stall_ms;
    const std::optional<AsyncCheckpointer::Done> before = async->finish();
    if (before)
      log.write_checkpoint(before->step - 1, previous_stall, before->bytes, before->write_ms,
                           before->staged_bytes);
    *stall_ms = async->start(
        ck.folder, state,
        checkpoint_state(par.named_parameters(), par.optimizer(), par.checkpoint_replicas()), world,
        ck.keep);
    return;
  }
  const auto start = Clock::now();
  save_checkpoint(ck.folder, state, par.named_parameters(), par.optimizer(), world, ck.keep,
                  par.checkpoint_replicas());
  log.write_checkpoint(step, std::chrono::duration<double>(Clock::now() - start).count() * 1e3,
                       checkpoint_bytes_of_rank(ck.folder, step + 1, world.rank()));
}

// The run's last asynchronous save completed (or its error thrown), and its line.
void finish_async(AsyncCheckpointer* async, double stall_ms, MetricsLog& log) {
  if (async == nullptr) return;
  if (const auto done = async->finish())
    log.write_checkpoint(done->step - 1, stall_ms, done->bytes, done->write_ms, done->staged_bytes);
}

// x with `digits` decimals.
std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

// The run's last lines: what it did and where its files are.
std::string run_summary(const TrainConfig& config, const TrainResult& r,
                        std::optional<double> val_loss, double seconds) {
  const int64_t steps = int64_t(r.losses.size());
  if (steps == 0) return "";
  const double tokens =
      double(steps) * double(config.training.global_batch) * double(config.model.seq_len);
  std::string out =
      str_cat("done: ", steps, " steps (", r.first_step, " .. ", r.first_step + steps - 1, ") in ",
              fixed(seconds, 1), " s, ", fixed(seconds > 0 ? tokens / seconds : 0, 0),
              " tokens/s; last train loss ", fixed(r.losses.back(), 4));
  if (val_loss) out += str_cat(", val loss ", fixed(*val_loss, 4));
  out += str_cat("\n  metrics:    ", config.metrics.run_folder, "/metrics_rank*.jsonl\n");
  if (!config.checkpoint.folder.empty())
    out += str_cat("  checkpoint: ", config.checkpoint.folder, "\n");
  return out;
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
  const CheckpointConfig& ck = config.checkpoint;
  const int64_t run_started = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  const std::vector<FolderLock> locks = check_run(config, *world);  // train/run_checks.h
  if (t.threads > 0) set_num_threads(t.threads);
  const MemoryPlan plan = check_memory_plan(config, *world);  // before anything is built

  // The data, checked before any work; the layout, the model on it, the
  // data dealt over its dp ranks.
  const int64_t T = config.model.seq_len;
  const data::TextDataset dataset = load_dataset(config);
  dist::DeviceMesh mesh = build_mesh(world, config.parallel);
  const Device device = training_device(config, world->size());
  Parallelized par = parallelize(build_model(config), mesh, config, device);
  dist::DataLoader loader(dataset, T, t.global_batch, par.dp_size(), par.dp_rank(), t.seed);

  if (world->rank() == 0 && device.is_cpu())  // what the CPU ops and the GEMMs run with, and why
    std::printf("cpu: %s\nblas: %s; %s\n", cpu::describe_cpu().c_str(),
                cpu::describe_blas().c_str(), cpu::describe_bf16_gemm().c_str());
  TrainResult result;
  result.first_step = resume(config, par, loader, *world);
  init_from(config, par, *world, result.first_step > 0);
  MetricsLog log(config, par.model().config, device, world->rank(), world->size(),
                 result.first_step > 0);
  if (result.first_step >= t.steps && world->rank() == 0)
    std::printf(
        "resumed at step %lld, and training.steps = %lld: nothing left to train "
        "(raise training.steps to train on)\n",
        (long long)result.first_step, (long long)t.steps);
  const int64_t last = stop_after >= 0 ? std::min(stop_after, t.steps) : t.steps;
  NonfiniteCheck finite(config, *world);  // train/nonfinite.h
  int64_t last_saved = result.first_step;
  // checkpoint.async: the saver, and the stall of the save in flight.
  const std::unique_ptr<AsyncCheckpointer> async =
      ck.async ? std::make_unique<AsyncCheckpointer>() : nullptr;
  double stall_ms = 0;
  std::optional<double> last_val;  // the summary's
  const auto loop_started = std::chrono::steady_clock::now();
  for (int64_t step = result.first_step; step < last; ++step) {
    log.begin_step(par.comm_groups());
    manual_seed(t.seed * 1000003 + uint64_t(step));  // dropout: the same masks after a resume
    par.zero_grad();
    const data::Batch batch = loader.next();
    const double rank_loss =
        par.forward_backward(ops::to(batch.x, device), ops::to(batch.y, device));
    par.sync_gradients();
    TraceSpan optimizer_span("optimizer step");  // the gradient norm, clipping, AdamW
    const double grad_norm = par.clip_grad_norm(t.grad_clip);
    const double loss = par.batch_loss(rank_loss);  // both the same on every rank
    const double lr = schedule_lr(config, step);
    if (finite.may_update(step, loss, grad_norm, par.named_parameters(), last_saved))
      par.optimizer_step(lr);
    optimizer_span.end();

    result.losses.push_back(loss);
    result.grad_norms.push_back(grad_norm);
    StepMetrics m = log.end_step(step, loss, grad_norm, lr, par.comm_groups());
    if (ends_period(step, config.metrics.eval_every))
      last_val = m.val_loss = par.val_loss(dataset, T, device);
    log.write(m);  // before a save: once the step is saved, it is logged
    if (!ck.folder.empty() && (ends_period(step, ck.interval) || step + 1 == t.steps)) {
      save(ck, step, lr, run_started, par, loader, *world, log, async.get(), &stall_ms);
      last_saved = step + 1;
    }
  }
  finish_async(async.get(), stall_ms, log);  // the run ends once its last save is whole
  finish_pruning();                          // and the saves it pruned are deleted
  const uint64_t peak = device.is_cuda() ? cuda::max_memory_allocated(device.index)
                                         : cpu::host_memory_stats().peak_allocated;
  if (world->rank() == 0) {
    std::printf("%s", measured_beside_plan(plan, peak, peak_resident_bytes()).c_str());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_started).count();
    std::printf("%s", run_summary(config, result, last_val, seconds).c_str());
  }
  return result;
}

void export_model(const TrainConfig& config, const std::string& out, bool with_logits,
                  ExportFormat format) {
  const bool hf = format == ExportFormat::kHf;
  if (hf) check_gpt2_shape(config.model, "export --format hf");
  SPMD_CHECK(!config.checkpoint.folder.empty(),
             "export: set checkpoint.folder to the run's folder");
  const TrainedModel trained = load_trained_model(config);
  const std::shared_ptr<nn::Transformer>& model = trained.model;
  if (hf) {
    save_hf_gpt2(*model, config.model, out);
  } else {
    model->save(out);
  }
  std::printf("exported step %lld of %s to %s%s (%lld parameters)\n", (long long)trained.step,
              config.checkpoint.folder.c_str(), out.c_str(),
              hf ? " in Hugging Face's GPT-2 layout" : "", (long long)model->num_parameters());
  if (!with_logits) return;
  NoGradGuard no_grad;
  const int64_t T = model->config.max_seq_len, V = model->config.vocab_size;
  std::vector<int64_t> values(size_t(2 * T));
  for (size_t i = 0; i < values.size(); ++i) values[i] = int64_t(i * 7 % size_t(V));
  const Tensor ids = ops::from_vector(values, Shape{2, T});
  save_safetensors(hf ? out + "/logits.safetensors" : out + ".logits.safetensors",
                   {{"ids", ids}, {"logits", (*model)(ids)}});
}

}  // namespace spmd::train
