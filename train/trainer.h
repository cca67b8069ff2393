// spmd-train's loop: build the layout, the model, the data and the optimizer
// from a TrainConfig, resume from the last checkpoint if there is one, then
// for each step, as TorchTitan's train step,
//
//   next global batch (this rank's rows) -> forward and backward, in
//   training.microbatches chunks -> the gradients' sync -> clip to the
//   global norm -> the batch's loss -> lr from the schedule -> AdamW step,
//   unless the loss or the norm is not finite (train/nonfinite.h) ->
//   metrics -> checkpoint every K steps
//
// The loop names no strategy: the parallelized model (Parallelized,
// train/parallelize.h) does at each arrow what its layout needs (a
// pipeline's steps for the forward and backward, DDP's or FSDP's hooks or
// the averages after the backwards for the sync, a norm over the split
// pieces for the clip).
//
// Metrics go to the console (rank 0, one line per log step) and, per rank,
// to <run_folder>/metrics_rank<R>.jsonl: step, loss (the mean over the dp
// ranks; with experts the objective adds moe_aux_coef x the balancing
// loss, which `loss` leaves out), grad_norm, lr, tokens_per_s, mfu (model
// FLOPs utilization, train/flops.h), step_ms,
// comm_wait_ms (time blocked in the groups' collectives), mem_allocated and mem_peak (bytes,
// this rank's allocator) and val_loss on eval steps; after each save a line
// of its own with step, checkpoint_ms and checkpoint_bytes (the save's time
// and this rank's file), written after the step's (train/metrics.h).
#pragma once

#include <memory>

#include "parallel/comm/process_group.h"
#include "parallel/comm/types.h"
#include "train/config.h"

namespace spmd::train {

struct TrainResult {
  std::vector<double> losses;      // per step this run took
  std::vector<double> grad_norms;  // per step: the global norm before clipping
  int64_t first_step = 0;          // > 0 when it resumed
};

// The backend parallel.backend names: "auto" is NCCL when
// training.device = "cuda", else TCP ("gloo" is TCP too).
dist::CommBackend comm_backend(const TrainConfig& config);

// The device a rank trains on: the CPU, or GPU LOCAL_RANK (0 in a world of
// one), made current. Throws InvalidArgument when training.device = "cuda"
// and that GPU is not there (a build without CUDA, or fewer GPUs than local
// ranks).
Device training_device(const TrainConfig& config, int world_size);

// Collective over the world: every rank runs it with the same config.
// stop_after: end after this many steps of the schedule (as if the job were
// stopped there, a checkpoint at that step included); -1: training.steps.
TrainResult run_training(const TrainConfig& config,
                         const std::shared_ptr<dist::ProcessGroup>& world, int64_t stop_after = -1);

// What `spmd-train export` writes.
enum class ExportFormat {
  kSpmd,  // one safetensors file under the model's own names (PyTorch's)
  kHf,    // a folder in Hugging Face's GPT-2 layout (train/hf_gpt2.h)
};

// Loads the latest checkpoint of config.checkpoint.folder into one whole
// model (one process, whatever layout saved it) and saves the model to
// `out`: kSpmd, a safetensors file under the model's names; kHf, the folder
// `out` with model.safetensors and config.json. with_logits: also writes
// the model's "logits" for fixed "ids" (2, T), to <out>.logits.safetensors
// (kSpmd) or <out>/logits.safetensors (kHf). Throws when the folder has no
// checkpoint, and for kHf first when the model is not GPT-2's shape
// (check_gpt2_shape).
void export_model(const TrainConfig& config, const std::string& out, bool with_logits,
                  ExportFormat format = ExportFormat::kSpmd);

}  // namespace spmd::train
