// Loading a config in four steps: collect every value given (the file's, then
// the overrides', each remembered with where it was set), start the model from
// its preset, assign each value to its field by type, then check ranges and
// the dims that must agree. One list of keys, for_each_field(), serves loading,
// the unknown-key errors and printing. Not here: the world size (check_layout,
// layout_check.cpp) and what the trainer does with the values.
#include "train/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <deque>
#include <initializer_list>
#include <limits>
#include <map>
#include <sstream>
#include <utility>

#include "autograd/nn/transformer.h"
#include "runtime/error.h"
#include "runtime/resource_limits.h"

namespace spmd::train {
namespace {

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
  f("model", "dropout", c.model.dropout...);
  f("model", "tie_embeddings", c.model.tie_embeddings...);
  f("model", "n_experts", c.model.n_experts...);
  f("model", "moe_top_k", c.model.moe_top_k...);
  f("model", "moe_every", c.model.moe_every...);
  f("model", "moe_capacity_factor", c.model.moe_capacity_factor...);
  f("model", "moe_aux_coef", c.model.moe_aux_coef...);
  f("data", "path", c.data.path...);
  f("data", "tokenizer", c.data.tokenizer...);
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
  f("training", "device", c.training.device...);
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

const Schema& schema() {
  static const Schema s = [] {
    Schema s;
    TrainConfig c;
    for_each_field(
        [&](const std::string& section, const std::string& key, auto& field) {
          if (s.keys.find(section) == s.keys.end()) s.sections.push_back(section);
          s.keys[section].push_back(key);
          s.is_string[section + "." + key] =
              std::is_same_v<std::decay_t<decltype(field)>, std::string>;
        },
        c);
    return s;
  }();
  return s;
}

std::string toml_string(const std::string& s);
std::string toml_double(double d);
std::string describe(const toml::node& value);
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

void Settings::read_file(const std::string& path) {
  constexpr uint64_t kMaxConfigBytes = 16 << 20;  // a TOML config is a few KiB
  try {
    const std::string doc = read_file_bounded(path, "the config", 1, kMaxConfigBytes);
    docs_.push_back(toml::parse(std::string_view(doc), std::string_view(path)));
  } catch (const toml::parse_error& e) {
    SPMD_THROW(InvalidArgument, path, ":", e.source().begin.line, ":", e.source().begin.column,
               ": ", e.description());
  }
  const Schema& s = schema();
  for (auto&& [section, table] : docs_.back()) {
    const std::string name(section.str());
    const std::string at = str_cat(path, ":", section.source().begin.line, ": ");
    const std::string sections = " (sections: " + join(s.sections, "") + ")";
    if (!s.keys.count(name)) {
      SPMD_CHECK(!table.is_table(), at, "unknown section [", name, "]", sections);
      SPMD_THROW(InvalidArgument, at, "unknown key '", name, "' (keys go in a [section])",
                 sections);
    }
    SPMD_CHECK(table.is_table(), at, "'", name, "' must be a table ([", name, "])");
    for (auto&& [key, value] : *table.as_table()) {
      const std::string full = name + "." + std::string(key.str());
      SPMD_CHECK(s.is_string.count(full), path, ":", key.source().begin.line, ": unknown key '",
                 full, "' (", name, " has ", join(s.keys.at(name), ""), ")");
      by_key_[full] = {&value, str_cat(path, ":", value.source().begin.line)};
    }
  }
}

// "section.key=value" or "--section.key=value". The value is TOML (2, 3e-4,
// true, "text"); for a string key, bare text is the string itself.
void Settings::read_override(const std::string& text) {
  const std::string arg = text.rfind("--", 0) == 0 ? text.substr(2) : text;
  const std::string where = "override --" + arg;
  const size_t eq = arg.find('=');
  SPMD_CHECK(eq != std::string::npos && arg.find('.') < eq, where,
             ": expected --section.key=value");
  const std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
  const Schema& s = schema();
  if (!s.is_string.count(key)) {
    const std::string section = key.substr(0, key.find('.'));
    SPMD_CHECK(s.keys.count(section), where, ": unknown section [", section,
               "] (sections: ", join(s.sections, ""), ")");
    SPMD_THROW(InvalidArgument, where, ": unknown key '", key, "' (", section, " has ",
               join(s.keys.at(section), ""), ")");
  }
  toml::table doc;
  try {
    const std::string line = "v = " + value;
    doc = toml::parse(std::string_view(line), std::string_view("override"));
  } catch (const toml::parse_error&) {
  }
  const bool parsed = doc.size() == 1 && doc.contains("v");
  if (!parsed || (s.is_string.at(key) && !doc["v"].is_string())) {
    doc = toml::table{{"v", value}};
  }
  docs_.push_back(std::move(doc));
  by_key_[key] = {docs_.back().get("v"), where};
}

// --- Assigning --------------------------------------------------------------------------

// The model before its keys are assigned: the preset's, or for "custom" the
// defaults of the shape (Llama's head is untied).
ModelConfig model_defaults(const std::string& preset, const std::string& shape) {
  ModelConfig m;
  m.preset = preset;
  m.shape = shape;
  if (preset == "custom") {
    m.tie_embeddings = shape != "llama";
    return m;
  }
  const nn::TransformerConfig t = nn::TransformerConfig::preset(preset);
  m.shape = "gpt2";
  m.vocab_size = t.vocab_size;
  m.seq_len = t.max_seq_len;
  m.n_layers = t.n_layers;
  m.n_heads = t.n_heads;
  m.n_kv_heads = t.n_kv_heads;
  m.d_model = t.d_model;
  m.dropout = t.dropout;
  m.tie_embeddings = t.tie_embeddings;
  return m;
}

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
  c.one_of("model.preset", m.preset, {"tiny", "small", "gpt2", "custom"});
  c.one_of("model.shape", m.shape, {"gpt2", "llama"});
  c.require(m.preset == "custom" || m.shape == "gpt2", {"model.shape"}, "model.shape \"", m.shape,
            "\" needs model.preset = \"custom\" (the presets are GPT-2's)");
  c.at_least("model.vocab_size", m.vocab_size, 1);
  c.at_least("model.seq_len", m.seq_len, 1);
  c.at_least("model.n_layers", m.n_layers, 1);
  c.at_least("model.n_heads", m.n_heads, 1);
  c.at_least("model.n_kv_heads", m.n_kv_heads, 0);
  c.at_least("model.d_model", m.d_model, 1);
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
}

void check(const TrainConfig& t, const Checker& c) {
  check_model(t.model, c);

  c.one_of("data.tokenizer", t.data.tokenizer, {"byte", "bpe"});
  c.require(t.data.tokenizer != "bpe" || !t.data.path.empty(), {"data.tokenizer", "data.path"},
            "data.tokenizer = \"bpe\" reads a token file: set data.path to the .bin that "
            "spmd-tokenize wrote");
  c.require(t.data.tokenizer != "byte" || t.model.vocab_size >= 256,
            {"model.vocab_size", "data.tokenizer"}, "model.vocab_size ", t.model.vocab_size,
            " is less than the byte tokenizer's 256 tokens");
  c.in_range("data.eval_fraction", t.data.eval_fraction, 0, 1);

  const OptimizerConfig& o = t.optimizer;
  c.one_of("optimizer.name", o.name, {"adamw", "sgd"});
  c.finite_at_least("optimizer.lr", o.lr, 0, /*strict=*/true);
  c.in_range("optimizer.beta1", o.beta1, 0, 1);
  c.in_range("optimizer.beta2", o.beta2, 0, 1);
  c.finite_at_least("optimizer.eps", o.eps, 0, /*strict=*/true);
  c.finite_at_least("optimizer.weight_decay", o.weight_decay, 0);

  const TrainingConfig& r = t.training;
  c.at_least("training.steps", r.steps, 1);
  c.at_least("training.global_batch", r.global_batch, 1);
  c.at_least("training.microbatches", r.microbatches, 1);
  c.require(r.global_batch % r.microbatches == 0,
            {"training.microbatches", "training.global_batch"}, "training.global_batch ",
            r.global_batch, " is not divisible by training.microbatches ", r.microbatches);
  c.finite_at_least("training.grad_clip", r.grad_clip, 0);
  c.at_least("training.threads", r.threads, 0);
  c.one_of("training.activation_checkpointing", r.activation_checkpointing, {"none", "full"});
  c.one_of("training.device", r.device, {"cpu", "cuda"});

  c.at_least("schedule.warmup_steps", t.schedule.warmup_steps, 0);
  c.require(t.schedule.warmup_steps <= r.steps, {"schedule.warmup_steps", "training.steps"},
            "schedule.warmup_steps ", t.schedule.warmup_steps, " is more than training.steps ",
            r.steps);
  c.one_of("schedule.decay", t.schedule.decay, {"cosine", "linear", "constant"});
  c.in_range("schedule.min_lr_ratio", t.schedule.min_lr_ratio, 0, 1, /*closed=*/true);

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
            {"parallel.pp_stages_per_rank", "parallel.pp_schedule"},
            "parallel.pp_stages_per_rank ", p.pp_stages_per_rank, " with pp_schedule \"",
            p.pp_schedule, "\": the interleaved schedule, and only it, runs 2 or more stages "
            "per rank");
  c.one_of("parallel.backend", p.backend, {"auto", "tcp", "gloo", "nccl"});
  c.require(p.backend != "nccl" || t.training.device == "cuda",
            {"parallel.backend", "training.device"}, "parallel.backend = \"nccl\" runs collectives on GPUs: it needs training.device = "
            "\"cuda\"");

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

}  // namespace

TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  Settings settings;
  if (!path.empty()) settings.read_file(path);
  for (const std::string& o : overrides) settings.read_override(o);

  const Checker checker(settings);
  std::string preset = "tiny", shape = "gpt2";
  if (const Setting* s = settings.find("model.preset")) assign("model.preset", *s, preset);
  if (const Setting* s = settings.find("model.shape")) assign("model.shape", *s, shape);
  checker.one_of("model.preset", preset, {"tiny", "small", "gpt2", "custom"});

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
  t.n_kv_heads = m.n_kv_heads;
  t.dropout = m.dropout;
  t.tie_embeddings = m.tie_embeddings;
  t.n_experts = m.n_experts;
  t.moe_top_k = m.moe_top_k;
  t.moe_every = m.moe_every;
  t.moe_capacity_factor = m.moe_capacity_factor;
  return t;
}

// --- Printing ---------------------------------------------------------------------------

std::string to_toml(const TrainConfig& c) {
  SPMD_CHECK(c.training.seed <= uint64_t(std::numeric_limits<int64_t>::max()),
             "to_toml: training.seed ", c.training.seed, " does not fit a TOML integer");
  TrainConfig from_preset = c;  // what load_config fills in before the model's keys
  from_preset.model = model_defaults(c.model.preset, c.model.shape);
  const bool preset = c.model.preset != "custom";
  std::ostringstream os;
  os << "# spmd-train config: every key, resolved. load_config() reads it back.\n";
  std::string current;
  for_each_field(
      [&](const std::string& section, const std::string& key, const auto& field,
          const auto& preset_field) {
        if (section != current) os << (current.empty() ? "" : "\n") << "[" << section << "]\n";
        current = section;
        using T = std::decay_t<decltype(field)>;
        std::string value;
        if constexpr (std::is_same_v<T, std::string>)
          value = toml_string(field);
        else if constexpr (std::is_same_v<T, bool>)
          value = field ? "true" : "false";
        else if constexpr (std::is_integral_v<T>)
          value = std::to_string(field);
        else
          value = toml_double(field);
        if (preset && section == "model" && key != "preset" && field == preset_field)
          os << "# " << key << " = " << value << "  (preset \"" << c.model.preset << "\")\n";
        else
          os << key << " = " << value << "\n";
      },
      c, from_preset);
  return os.str();
}

namespace {

// A basic TOML string, "...": quotes, backslashes and control characters
// escaped, other UTF-8 as it is.
std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04X", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// The shortest text that reads back as the same double, always a TOML float.
std::string toml_double(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto end = std::to_chars(buf, buf + sizeof buf, d).ptr;
  std::string s(buf, end);
  const size_t e = s.find('e');
  if (e == std::string::npos) return s.find('.') == std::string::npos ? s + ".0" : s;
  const size_t digits = s[e + 1] == '-' || s[e + 1] == '+' ? e + 2 : e + 1;
  while (s.size() > digits + 1 && s[digits] == '0') s.erase(digits, 1);  // 1e-08 -> 1e-8
  return s;
}

// "string \"ten\"", "float 2.5", "a table": a value as an error message names it.
std::string describe(const toml::node& v) {
  switch (v.type()) {
    case toml::node_type::string:
      return "string " + toml_string(*v.value<std::string>());
    case toml::node_type::integer:
      return "integer " + std::to_string(*v.value<int64_t>());
    case toml::node_type::floating_point:
      return "float " + toml_double(*v.value<double>());
    case toml::node_type::boolean:
      return *v.value<bool>() ? "boolean true" : "boolean false";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    default:
      return "a date or time";
  }
}

std::string join(const std::vector<std::string>& items, const char* quote) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + (quote + item + quote);
  return out;
}

}  // namespace
}  // namespace spmd::train
