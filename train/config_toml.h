// Inside the config loader (config.cpp, config_toml.cpp, config_print.cpp),
// not for other callers: the one list of keys, for_each_field(); the values
// collected from the file and the overrides, each with where it was set
// (Settings); assigning a value to its field by type (assign); and the TOML
// text of strings, doubles and values for messages and printing.
#pragma once

#include <toml++/toml.h>

#include <deque>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/error.h"
#include "train/config.h"

namespace spmd::train::config_detail {

// Every key, in the order to_toml writes them. `f` gets the section, the key
// and the field of each config in `c` (one to load, two to compare).
template <class F, class... C>
void for_each_field(F&& f, C&... c) {
  f("model", "preset", c.model.preset...);
  f("model", "shape", c.model.shape...);
  f("model", "vocab_size", c.model.vocab_size...);
  f("model", "seq_len", c.model.seq_len...);
  f("model", "n_layers", c.model.n_layers...);
  f("model", "n_heads", c.model.n_heads...);
  f("model", "n_kv_heads", c.model.n_kv_heads...);
  f("model", "d_model", c.model.d_model...);
  f("model", "ffn_hidden", c.model.ffn_hidden...);
  f("model", "dropout", c.model.dropout...);
  f("model", "tie_embeddings", c.model.tie_embeddings...);
  f("model", "n_experts", c.model.n_experts...);
  f("model", "moe_top_k", c.model.moe_top_k...);
  f("model", "moe_every", c.model.moe_every...);
  f("model", "moe_capacity_factor", c.model.moe_capacity_factor...);
  f("model", "moe_aux_coef", c.model.moe_aux_coef...);
  f("model", "init_from", c.model.init_from...);
  f("data", "path", c.data.path...);
  f("data", "tokenizer", c.data.tokenizer...);
  f("data", "gpt2_vocab", c.data.gpt2_vocab...);
  f("data", "eval_fraction", c.data.eval_fraction...);
  f("optimizer", "name", c.optimizer.name...);
  f("optimizer", "lr", c.optimizer.lr...);
  f("optimizer", "beta1", c.optimizer.beta1...);
  f("optimizer", "beta2", c.optimizer.beta2...);
  f("optimizer", "eps", c.optimizer.eps...);
  f("optimizer", "weight_decay", c.optimizer.weight_decay...);
  f("schedule", "warmup_steps", c.schedule.warmup_steps...);
  f("schedule", "decay", c.schedule.decay...);
  f("schedule", "min_lr_ratio", c.schedule.min_lr_ratio...);
  f("training", "steps", c.training.steps...);
  f("training", "global_batch", c.training.global_batch...);
  f("training", "microbatches", c.training.microbatches...);
  f("training", "grad_clip", c.training.grad_clip...);
  f("training", "seed", c.training.seed...);
  f("training", "threads", c.training.threads...);
  f("training", "activation_checkpointing", c.training.activation_checkpointing...);
  f("training", "selective_ac_option", c.training.selective_ac_option...);
  f("training", "device", c.training.device...);
  f("training", "mixed_precision", c.training.mixed_precision...);
  f("training", "skip_nonfinite_steps", c.training.skip_nonfinite_steps...);
  f("training", "memory_limit_gb", c.training.memory_limit_gb...);
  f("parallel", "dp_replicate", c.parallel.dp_replicate...);
  f("parallel", "dp_shard", c.parallel.dp_shard...);
  f("parallel", "tp", c.parallel.tp...);
  f("parallel", "pp", c.parallel.pp...);
  f("parallel", "cp", c.parallel.cp...);
  f("parallel", "ep", c.parallel.ep...);
  f("parallel", "sequence_parallel", c.parallel.sequence_parallel...);
  f("parallel", "pp_schedule", c.parallel.pp_schedule...);
  f("parallel", "pp_microbatches", c.parallel.pp_microbatches...);
  f("parallel", "pp_stages_per_rank", c.parallel.pp_stages_per_rank...);
  f("parallel", "backend", c.parallel.backend...);
  f("parallel", "fsdp_reshard_after_forward", c.parallel.fsdp_reshard_after_forward...);
  f("checkpoint", "folder", c.checkpoint.folder...);
  f("checkpoint", "interval", c.checkpoint.interval...);
  f("checkpoint", "keep", c.checkpoint.keep...);
  f("checkpoint", "resume", c.checkpoint.resume...);
  f("checkpoint", "allow_partial_load", c.checkpoint.allow_partial_load...);
  f("checkpoint", "async", c.checkpoint.async...);
  f("metrics", "log_every", c.metrics.log_every...);
  f("metrics", "eval_every", c.metrics.eval_every...);
  f("metrics", "run_folder", c.metrics.run_folder...);
  f("metrics", "peak_tflops", c.metrics.peak_tflops...);
}

// Each section's keys in order, and whether a key holds a string.
struct Schema {
  std::vector<std::string> sections;
  std::map<std::string, std::vector<std::string>> keys;  // section -> its keys
  std::map<std::string, bool> is_string;                 // "parallel.tp" -> false
};

// Built once from for_each_field().
const Schema& schema();

// A basic TOML string, "...": quotes, backslashes and control characters
// escaped, other UTF-8 as it is.
std::string toml_string(const std::string& s);
// The shortest text that reads back as the same double, always a TOML float.
std::string toml_double(double d);
// "string \"ten\"", "float 2.5", "a table": a value as an error message names it.
std::string describe(const toml::node& value);
// "a, b" with each item between `quote`s.
std::string join(const std::vector<std::string>& items, const char* quote);

// --- Collecting what was set ------------------------------------------------------------

// A value given for a key, and where: "configs/ddp.toml:7" or "override --a.b=1".
struct Setting {
  const toml::node* value;
  std::string where;
};

class Settings {
 public:
  void read_file(const std::string& path);
  void read_override(const std::string& text);
  const Setting* find(const std::string& key) const {
    auto it = by_key_.find(key);
    return it == by_key_.end() ? nullptr : &it->second;
  }
  // "where: " for the first of `keys` that was set, "" when all are defaults.
  std::string where(std::initializer_list<const char*> keys) const {
    for (const char* key : keys)
      if (const Setting* s = find(key)) return s->where + ": ";
    return "";
  }

 private:
  std::deque<toml::table> docs_;  // owns every node below
  std::map<std::string, Setting> by_key_;
};

// The model before its keys are assigned: the preset's, or for "custom" the
// defaults of the shape (Llama's head is untied).
ModelConfig model_defaults(const std::string& preset, const std::string& shape);

// Sets `field` from the value given for `key`, or throws naming the key, where
// it was set, the type wanted and the value got.
template <class T>
void assign(const std::string& key, const Setting& s, T& field) {
  const toml::node& v = *s.value;
  const auto wrong = [&](const char* want) {
    SPMD_THROW(InvalidArgument, s.where, ": ", key, " must be ", want, ", got ", describe(v));
  };
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) wrong("a string");
    field = *v.value<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) wrong("a boolean");
    field = *v.value<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_integer()) wrong("an integer");
    const int64_t i = *v.value<int64_t>();
    SPMD_CHECK(std::cmp_greater_equal(i, std::numeric_limits<T>::min()), s.where, ": ", key,
               " must be at least ", std::numeric_limits<T>::min(), ", got ", i);
    SPMD_CHECK(std::cmp_less_equal(i, std::numeric_limits<T>::max()), s.where, ": ", key,
               " must be at most ", std::numeric_limits<T>::max(), ", got ", i);
    field = T(i);
  } else {
    if (!v.is_number()) wrong("a number");
    field = *v.value<double>();
  }
}
}  // namespace spmd::train::config_detail
