// Hugging Face's GPT-2 folder (train/hf_gpt2.h): the name map, the writer,
// and the reader that checks the folder against the model, then fills each
// rank's pieces with the boxes of the file they hold.
#include "train/hf_gpt2.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "autograd/grad_mode.h"
#include "parallel/placement.h"
#include "runtime/durable_file.h"
#include "tensor/copy.h"
#include "tensor/factory.h"
#include "tensor/safetensors.h"
#include "tensor/views.h"

namespace spmd::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kWeightsFile = "model.safetensors";
constexpr const char* kConfigFile = "config.json";

// A block's modules: spmd's name, GPT-2's, and whether it is a Conv1D there.
struct ModuleName {
  const char* spmd;
  const char* hf;
  bool conv1d;
};
constexpr ModuleName kBlockModules[] = {
    {"attn_norm", "ln_1", false},     {"attn.wqkv", "attn.c_attn", true},
    {"attn.wo", "attn.c_proj", true}, {"ffn_norm", "ln_2", false},
    {"mlp.w1", "mlp.c_fc", true},     {"mlp.w2", "mlp.c_proj", true},
};
constexpr ModuleName kTopModules[] = {
    {"tok_embeddings", "transformer.wte", false},
    {"pos_embeddings", "transformer.wpe", false},
    {"norm", "transformer.ln_f", false},
    {"output", "lm_head", false},  // a Linear in GPT2LMHeadModel: [out, in] as spmd's
};

// "attn.wqkv.weight" -> its module's row and the leaf ("weight"); null when none matches.
template <size_t N>
const ModuleName* find_module(const ModuleName (&table)[N], const std::string& name,
                              std::string* leaf) {
  for (const ModuleName& m : table) {
    const std::string prefix = std::string(m.spmd) + ".";
    if (name.starts_with(prefix) && (name.ends_with(".weight") || name.ends_with(".bias")) &&
        name.find('.', prefix.size()) == std::string::npos) {
      *leaf = name.substr(prefix.size());
      return &m;
    }
  }
  return nullptr;
}

// The config.json at `path`, read and checked against the model config: the
// five sizes must be equal, and what GPT-2 lets a config change
// (activation, epsilon, tying, the MLP's width) must be what this model does.
void check_config_json(const std::string& path, const ModelConfig& m) {
  std::ifstream in(path);
  SPMD_CHECK(in.good(), "model.init_from: ", path, " is missing (a Hugging Face GPT-2 folder ",
             "holds config.json and model.safetensors)");
  json c;
  try {
    c = json::parse(in);
  } catch (const json::exception& e) {
    SPMD_THROW(InvalidArgument, "model.init_from: ", path, " is not JSON (", e.what(), ")");
  }
  SPMD_CHECK(c.is_object(), "model.init_from: ", path, " is not a JSON object");
  const std::pair<const char*, std::pair<const char*, int64_t>> sizes[] = {
      {"n_embd", {"model.d_model", m.d_model}},
      {"n_layer", {"model.n_layers", m.n_layers}},
      {"n_head", {"model.n_heads", m.n_heads}},
      {"vocab_size", {"model.vocab_size", m.vocab_size}},
      {"n_positions", {"model.seq_len", m.seq_len}}};
  for (const auto& [key, ours] : sizes) {
    SPMD_CHECK(c.contains(key) && c[key].is_number_integer(), "model.init_from: ", path,
               " has no whole number ", key);
    const int64_t found = c[key].get<int64_t>();
    SPMD_CHECK(found == ours.second, "model.init_from: ", path, ": ", key, " is ", found, " but ",
               ours.first, " is ", ours.second);
  }
  const std::string type = c.value("model_type", "gpt2");
  SPMD_CHECK(type == "gpt2", "model.init_from: ", path, ": model_type is \"", type,
             "\"; only \"gpt2\" maps onto this model");
  const std::string act = c.value("activation_function", "gelu_new");
  SPMD_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", "model.init_from: ", path,
             ": activation_function is \"", act,
             "\", but this model's GELU is the tanh approximation (\"gelu_new\")");
  const double eps = c.value("layer_norm_epsilon", 1e-5);
  const double ours_eps = transformer_config(m).norm_eps;
  SPMD_CHECK(std::abs(eps - ours_eps) <= 1e-12, "model.init_from: ", path,
             ": layer_norm_epsilon is ", eps, " but this model's LayerNorm uses ", ours_eps);
  const bool tied = c.value("tie_word_embeddings", true);
  SPMD_CHECK(tied == m.tie_embeddings, "model.init_from: ", path, ": tie_word_embeddings is ",
             tied ? "true" : "false", " but model.tie_embeddings is ",
             m.tie_embeddings ? "true" : "false");
  if (c.contains("n_inner") && !c["n_inner"].is_null())
    SPMD_CHECK(c["n_inner"] == 4 * m.d_model, "model.init_from: ", path, ": n_inner is ",
               c["n_inner"].dump(), " but this model's MLP is 4 x d_model = ", 4 * m.d_model);
}

// GPT2LMHeadModel's config for `t` (the model) and `m` (its config's keys).
json config_json(const nn::TransformerConfig& t, const ModelConfig& m) {
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", t.vocab_size},
          {"n_positions", t.max_seq_len},
          {"n_ctx", t.max_seq_len},
          {"n_embd", t.d_model},
          {"n_layer", t.n_layers},
          {"n_head", t.n_heads},
          {"n_inner", nullptr},  // 4 n_embd
          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", t.norm_eps},
          {"resid_pdrop", m.dropout},
          {"embd_pdrop", m.dropout},
          {"attn_pdrop", m.dropout},
          {"initializer_range", 0.02},
          {"tie_word_embeddings", t.tie_embeddings},
          {"torch_dtype", "float32"}};
}

// The box [offset, offset + size) of a 1-D or 2-D tensor stored as `e` in
// `path`, read alone: one read when it spans whole rows, else one per row.
Tensor read_box(const std::string& path, const SafetensorsEntry& e, const Shape& offset,
                const Shape& size) {
  SPMD_CHECK(e.shape.ndim() == 1 || e.shape.ndim() == 2, "model.init_from: ", path,
             ": a tensor of ", e.shape.ndim(), " dims where GPT-2 has matrices and vectors");
  const bool matrix = e.shape.ndim() == 2;
  const int64_t row_len = matrix ? e.shape[1] : e.shape[0];
  const int64_t row0 = matrix ? offset[0] : 0, rows = matrix ? size[0] : 1;
  const int64_t col0 = matrix ? offset[1] : offset[0], cols = matrix ? size[1] : size[0];
  const uint64_t elem = element_size(e.dtype);
  Tensor out = ops::empty(size, {e.dtype, Device::cpu()});
  char* dst = static_cast<char*>(out.raw_data());
  std::ifstream in(path, std::ios::binary);
  const auto read = [&](int64_t row, int64_t count, int64_t at) {
    in.seekg(std::streamoff(e.offset + uint64_t(row * row_len + col0) * elem));
    in.read(dst + uint64_t(at) * elem, std::streamsize(uint64_t(count) * elem));
  };
  if (cols == row_len) {
    read(row0, rows * cols, 0);
  } else {
    for (int64_t r = 0; r < rows; ++r) read(row0 + r, cols, r * cols);
  }
  SPMD_CHECK(in.good() || out.nbytes() == 0, "model.init_from: cannot read ", path,
             " (the file is shorter than its header says)");
  return out;
}

// The file's name for a GPT2LMHeadModel name: transformers' own saves of
// GPT2LMHeadModel say "transformer.h.0...", the GPT2Model files of the
// original release say "h.0...".
std::string file_name(const std::string& hf, bool bare) {
  return bare && hf.starts_with("transformer.") ? hf.substr(12) : hf;
}

// Whether a file's tensor is one of the attention's causal-mask buffers
// that older transformers versions saved ("h.0.attn.bias", "...masked_bias"):
// not parameters, rebuilt by the model.
bool is_mask_buffer(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

// Every tensor the model needs is in the index with its shape, and the index
// holds nothing else; else one InvalidArgument naming each difference.
void check_tensors(const std::string& path, const SafetensorsIndex& index, bool bare,
                   const NamedTensors& whole_model, bool tied) {
  std::vector<std::string> problems;
  std::set<std::string> expected;
  for (const auto& [name, t] : whole_model) {
    const HfName hf = hf_gpt2_name(name);
    const std::string key = file_name(hf.name, bare);
    expected.insert(key);
    const Shape want = hf.transposed ? Shape{t.shape()[1], t.shape()[0]} : t.shape();
    const auto it = index.entries.find(key);
    if (it == index.entries.end()) {
      problems.push_back(str_cat("missing tensor '", key, "' (", want, ", ", name, " here)"));
    } else if (it->second.shape != want) {
      problems.push_back(
          str_cat("tensor '", key, "' is ", it->second.shape, " but the model needs ", want));
    } else if (!is_floating(it->second.dtype)) {
      problems.push_back(str_cat("tensor '", key, "' is ", dtype_name(it->second.dtype),
                                 ", not a floating-point type"));
    }
  }
  for (const auto& [key, e] : index.entries) {
    if (expected.contains(key) || is_mask_buffer(key)) continue;
    problems.push_back(str_cat(
        "unknown tensor '", key, "' ", e.shape,
        key == "lm_head.weight" && tied ? " (model.tie_embeddings = true: the head is wte)" : ""));
  }
  if (problems.empty()) return;
  std::string text;
  for (const std::string& p : problems) text += "\n  " + p;
  SPMD_THROW(InvalidArgument, "model.init_from: ", path, " does not match the model (",
             problems.size(), " difference", problems.size() == 1 ? "" : "s", "):", text);
}

}  // namespace

HfName hf_gpt2_name(const std::string& spmd_name) {
  std::string leaf;
  if (const ModuleName* m = find_module(kTopModules, spmd_name, &leaf))
    return {str_cat(m->hf, ".", leaf), false};
  if (spmd_name.starts_with("layers.")) {
    const size_t dot = spmd_name.find('.', 7);
    if (dot != std::string::npos && dot > 7) {
      const std::string index = spmd_name.substr(7, dot - 7);
      if (const ModuleName* m = find_module(kBlockModules, spmd_name.substr(dot + 1), &leaf))
        return {str_cat("transformer.h.", index, ".", m->hf, ".", leaf),
                m->conv1d && leaf == "weight"};
    }
  }
  SPMD_THROW(InvalidArgument, "GPT-2 has no parameter for '", spmd_name, "'");
}

void check_gpt2_shape(const ModelConfig& m, const std::string& what) {
  SPMD_CHECK(m.shape == "gpt2", what, ": model.shape = \"", m.shape,
             "\" has no Hugging Face GPT-2 layout (only model.shape = \"gpt2\" does)");
  SPMD_CHECK(m.n_experts == 0, what, ": model.n_experts = ", m.n_experts,
             " has no Hugging Face GPT-2 layout (GPT-2's blocks are dense: set it to 0)");
  SPMD_CHECK(m.n_kv_heads == 0 || m.n_kv_heads == m.n_heads, what,
             ": model.n_kv_heads = ", m.n_kv_heads,
             " has no Hugging Face GPT-2 layout (GPT-2 has one key/value head per ",
             "head: 0 or model.n_heads = ", m.n_heads, ")");
}

void save_hf_gpt2(const nn::Transformer& model, const ModelConfig& m, const std::string& dir) {
  fs::create_directories(dir);
  NoGradGuard no_grad;
  TensorMap tensors;
  for (const auto& [name, p] : model.named_parameters()) {
    const HfName hf = hf_gpt2_name(name);
    tensors[hf.name] = hf.transposed ? ops::transpose(p, 0, 1) : p;  // written contiguous
  }
  // Each file written, synced and its size checked (runtime/durable_file.h),
  // then the folder that names them.
  save_safetensors((fs::path(dir) / kWeightsFile).string(), tensors, {{"format", "pt"}});
  write_durably((fs::path(dir) / kConfigFile).string(),
                config_json(model.config, m).dump(2) + "\n");
  sync_folder(dir);
  const fs::path parent = fs::absolute(dir).parent_path();
  if (!parent.empty()) sync_folder(parent.string());
}

void load_hf_gpt2(const std::string& dir, const ModelConfig& m, const NamedTensors& whole_model,
                  const NamedTensors& params) {
  check_config_json((fs::path(dir) / kConfigFile).string(), m);
  const std::string path = (fs::path(dir) / kWeightsFile).string();
  SPMD_CHECK(fs::exists(path), "model.init_from: ", path, " is missing");
  const SafetensorsIndex index = read_safetensors_index(path);
  const bool bare =
      !index.entries.contains("transformer.wte.weight") && index.entries.contains("wte.weight");
  check_tensors(path, index, bare, whole_model, m.tie_embeddings);

  NoGradGuard no_grad;  // parameters are filled in place
  for (const auto& [name, t] : params) {
    const HfName hf = hf_gpt2_name(name);
    const SafetensorsEntry& e = index.entries.at(file_name(hf.name, bare));
    for (const dist::Block& b : dist::local_blocks(t)) {
      if (b.size.numel() == 0) continue;
      if (!hf.transposed) {
        ops::copy_(dist::box_view(t, b.local_offset, b.size),
                   read_box(path, e, b.global_offset, b.size));
        continue;
      }
      // Conv1D's [in, out]: the box (rows r, columns c) of our [out, in]
      // is the box (rows c, columns r) of the file's, transposed.
      const Tensor src = read_box(path, e, Shape{b.global_offset[1], b.global_offset[0]},
                                  Shape{b.size[1], b.size[0]});
      ops::copy_(dist::box_view(t, b.local_offset, b.size), ops::transpose(src, 0, 1));
    }
  }
}

std::string hf_init_folder(const std::string& init_from) {
  SPMD_CHECK(init_from.starts_with("hf:") && init_from.size() > 3,
             "model.init_from must be \"hf:PATH\" (a Hugging Face GPT-2 folder), got \"", init_from,
             "\"");
  return init_from.substr(3);
}

}  // namespace spmd::train
