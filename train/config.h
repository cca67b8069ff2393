// The trainer's configuration: one TOML file of eight sections, as TorchTitan's
// job files are, plus `--section.key=value` overrides from the command line.
//
//   [model]      preset "tiny" | "small" | "gpt2" | "llama3.1-8b" | "llama3.1-70b" |
//                "llama3.1-405b" (nn::TransformerConfig::preset) or "custom"
//                (shape "gpt2" | "llama" and the dims below)
//   [data]       text file and tokenizer, the held-out fraction
//   [optimizer]  AdamW (or SGD) hyper-parameters
//   [schedule]   warm-up and decay of the learning rate
//   [training]   steps, global batch, gradient accumulation, clipping, seed
//   [parallel]   dp_replicate, dp_shard, tp, pp, cp, ep and their options
//   [checkpoint] where and how often, how many to keep, whether to resume, and
//                whether a checkpoint not exactly the model's may load in part
//   [metrics]    logging and eval cadence, the run folder
//
// Every field has a default, so an empty file (or no file) is a valid config:
// the tiny GPT-2 on the embedded text, one process. A named preset fills in the
// model's dims; a model key given in the file or an override replaces the
// preset's value (`preset = "small"` with `seq_len = 128`).
//
// Two passes of checks. load_config() checks what one config can know alone:
// types, ranges, choices and the divisibilities that need no world size, each
// error naming the key and where it was set. check_layout() checks the parallel
// dims against a world size, before any model or process group is built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spmd::nn {
struct TransformerConfig;  // autograd/nn/transformer.h
struct CheckpointOptions;  // autograd/nn/checkpoint_wrapper.h
}  // namespace spmd::nn

namespace spmd::train {

struct ModelConfig {
  std::string preset = "tiny";  // a preset of config.h's list, or "custom"
  std::string shape = "gpt2";   // "gpt2" or "llama" (a preset's is its own)
  int64_t vocab_size = 256;
  int64_t seq_len = 128;
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 0;  // 0: n_heads; fewer is grouped-query attention
  int64_t d_model = 128;
  int64_t ffn_hidden = 0;  // the MLP's hidden size; 0: derived (nn::TransformerConfig::hidden_dim)
  double dropout = 0;
  bool tie_embeddings = true;  // unless given: true for "gpt2", false for "llama"
  // Mixture of experts (nn::MoE) in place of the MLP of blocks 0, moe_every,
  // 2 moe_every, ...: n_experts experts, top moe_top_k per token; capacity
  // factor 0 drops no token. 0 experts: every block dense. The loss gains
  // moe_aux_coef x the load-balancing loss.
  int64_t n_experts = 0;
  int64_t moe_top_k = 2;
  int64_t moe_every = 1;
  double moe_capacity_factor = 0;
  double moe_aux_coef = 0.01;
  // "hf:PATH": a fresh run starts from the weights of the Hugging Face
  // GPT-2 folder PATH (train/hf_gpt2.h) in place of the seed's; a run that
  // resumes a checkpoint ignores it. "": the seed's.
  std::string init_from = "";
  bool operator==(const ModelConfig&) const = default;
};

struct DataConfig {
  // "byte": a text file, each byte a token ("": the embedded text,
  // train/CMakeLists.txt). "bpe": the .bin token file spmd-tokenize wrote
  // (model.vocab_size at least its vocabulary's). "gpt2": a text file (""
  // the embedded text) encoded at start with GPT-2's vocabulary from the
  // folder gpt2_vocab (encoder.json, vocab.bpe; model.vocab_size at least
  // its 50,257 tokens).
  std::string path = "";
  std::string tokenizer = "byte";  // "byte", "bpe" or "gpt2"
  std::string gpt2_vocab = "";     // data.tokenizer = "gpt2": the vocabulary's folder
  double eval_fraction = 0.1;      // the tail of the tokens held out for eval
  bool operator==(const DataConfig&) const = default;
};

struct OptimizerConfig {
  std::string name = "adamw";  // "adamw" or "sgd" (plain: lr and weight_decay only)
  double lr = 3e-4;            // the peak, reached after warm-up
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  bool operator==(const OptimizerConfig&) const = default;
};

struct ScheduleConfig {
  int64_t warmup_steps = 0;
  std::string decay = "cosine";  // "cosine", "linear" or "constant", over the steps after warm-up
  double min_lr_ratio = 0.1;     // the final lr, as a fraction of optimizer.lr
  bool operator==(const ScheduleConfig&) const = default;
};

struct TrainingConfig {
  int64_t steps = 20;
  int64_t global_batch = 8;  // sequences per optimizer step, over every replica
  int64_t microbatches = 1;  // gradient accumulation: forward-backward passes per step
  double grad_clip = 1.0;    // max global grad norm; 0: no clipping
  uint64_t seed = 0;         // less than 2^63 (a TOML integer)
  int threads = 0;           // intra-op threads per rank, at most its CPUs; 0: OpenMP's default
  // "none", "full" (every block recomputed in backward) or "selective":
  // TorchTitan's modes (docs/activation_checkpointing.md).
  std::string activation_checkpointing = "none";
  // With "selective": "op" (every block keeps its products' outputs and
  // recomputes the rest) or a positive integer k as a string, "2" (every
  // k-th block fully checkpointed, the others not): TorchTitan's key.
  std::string selective_ac_option = "op";
  // "f32", or "bf16": bf16 compute (autocast) and, under FSDP, bf16
  // gathered parameters; f32 master weights, optimizer state and gradient
  // reductions (FSDP2's MixedPrecisionPolicy; docs/memory.md).
  std::string mixed_precision = "f32";
  // Steps whose loss or gradient norm is not finite that a run skips
  // (without an update, with a warning) before it stops; 0: the first one
  // stops it (train/nonfinite.h).
  int64_t skip_nonfinite_steps = 0;
  // "cpu", or "cuda": each rank on GPU LOCAL_RANK (spmdrun sets it), the
  // NCCL backend unless parallel.backend says otherwise.
  std::string device = "cpu";
  // The most memory each rank may use, in GiB (2^30 bytes), beside the limits
  // found on the machine (train/memory_plan.h); 0: none of its own.
  double memory_limit_gb = 0;
  bool operator==(const TrainingConfig&) const = default;
};

// The world is dp_replicate x dp_shard x cp x tp x pp ranks; ep borrows its
// ranks from the data-parallel ones (dp_replicate x dp_shard x cp) and adds
// none.
struct ParallelConfig {
  int64_t dp_replicate = 1;  // DDP replicas (or HSDP's replicate axis)
  int64_t dp_shard = 1;      // FSDP's shard axis
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t cp = 1;
  int64_t ep = 1;
  bool sequence_parallel = false;    // with tp > 1: norms and dropout on T/tp of the sequence
  std::string pp_schedule = "1f1b";  // "gpipe", "1f1b", "interleaved" or "zbh1"
  int64_t pp_microbatches = 0;       // 0: pp
  int64_t pp_stages_per_rank = 1;    // virtual stages per rank; "interleaved" needs 2 or more
  std::string backend = "auto";      // "auto" (nccl on GPUs, else tcp), "tcp" (= "gloo"), "nccl"
  bool fsdp_reshard_after_forward = true;
  bool operator==(const ParallelConfig&) const = default;
};

struct CheckpointConfig {
  std::string folder = "";  // "": no checkpoints
  int64_t interval = 0;     // steps between checkpoints; 0: only after the last step
  int64_t keep = 2;         // the newest kept; 0: keep every one
  bool resume = true;       // start from the folder's latest checkpoint when there is one
  // Load a checkpoint whose tensors are not exactly the model's: what
  // matches is loaded, the rest stays as initialized (else: refused by name).
  bool allow_partial_load = false;
  // Write checkpoints on a thread of their own: the step only copies what
  // it saves into staging buffers (train/async_checkpoint.h).
  bool async = false;
  bool operator==(const CheckpointConfig&) const = default;
};

struct MetricsConfig {
  int64_t log_every = 1;                   // steps between console lines
  int64_t eval_every = 0;                  // steps between held-out evals; 0: none
  std::string run_folder = "runs/latest";  // JSON lines per rank, the resolved config
  // Per rank, for MFU (train/flops.h); 0: the hardware's peak for training.mixed_precision,
  // the CPU's measured, a GPU's datasheet figure.
  double peak_tflops = 0;
  bool operator==(const MetricsConfig&) const = default;
};

struct TrainConfig {
  ModelConfig model;
  DataConfig data;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  TrainingConfig training;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  MetricsConfig metrics;
  bool operator==(const TrainConfig&) const = default;
};

// Reads the TOML file at `path` ("": the defaults alone), then applies each
// override "section.key=value" (a leading "--" is allowed) in order. A value is
// read as TOML reads it (2, 3e-4, true, "text"); a string key also takes bare
// text (--data.path=shakespeare.txt). Returns the config with the model preset
// resolved into its dims.
// Throws InvalidArgument, the message starting with where the value came from
// ("configs/ddp.toml:7: " or "override --training.steps=0: "), for: a file that
// cannot be read or parsed, an unknown section or key, a value of the wrong
// type, one out of its range or not among its choices, and dims that disagree
// (global_batch not divisible by microbatches, d_model by n_heads, n_heads by
// n_kv_heads, ...).
TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// The model this config describes: the preset's TransformerConfig (or the
// shape's, for "custom") with this config's dims, dropout and tying.
nn::TransformerConfig transformer_config(const ModelConfig& model);

// The blocks' checkpointing that training.activation_checkpointing and
// training.selective_ac_option name: "full", every block, all recomputed;
// "selective" with "op", every block, the products' outputs kept; with "k",
// every k-th block, all recomputed.
// REQUIRES: activation_checkpointing is "full" or "selective", and the
// config passed load_config's checks.
nn::CheckpointOptions checkpoint_options(const TrainingConfig& training);

// Checks the parallel dims against a world of `world_size` ranks:
// dp_replicate x dp_shard x cp x tp x pp == world_size, ep divides
// dp_replicate x dp_shard x cp and model.n_experts (which it needs),
// global_batch divides over dp_replicate x dp_shard x microbatches (and the
// pipeline's microbatches), heads and vocabulary over tp, the sequence over cp
// (and tp with sequence_parallel) and, when cp > 1, over 2 x cp, pp <= n_layers.
// REQUIRES: `config` passed load_config's checks (every dim at least 1).
// Throws InvalidArgument naming the dims and their values otherwise.
void check_layout(const TrainConfig& config, int world_size);

// The config as TOML text, every section and key in the order above, for
// --print-config and the run folder. A model dim that its preset gives is
// written as a comment, so load_config of the text returns `config` again
// (and an override of the preset still changes the dims).
// REQUIRES: training.seed < 2^63 (checked).
std::string to_toml(const TrainConfig& config);

}  // namespace spmd::train
