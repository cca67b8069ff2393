// Tensor-parallel plans: matching names, applying styles, and the
// Transformer's plan written out entry by entry.
#include "parallel/tensor_parallel/plan.h"

#include <sstream>

namespace spmd::dist::tp {
namespace {

std::vector<std::string> components(const std::string& path) {
  std::vector<std::string> out;
  std::stringstream in(path);
  std::string part;
  while (std::getline(in, part, '.')) out.push_back(part);
  return out;
}

template <class S>
std::shared_ptr<ParallelStyle> style(S s) {
  return std::make_shared<S>(std::move(s));
}

void check_divides(int64_t size, int64_t tp, const char* what) {
  SPMD_CHECK(size % tp == 0, "tensor parallel: ", what, " (", size,
             ") does not divide by tp = ", tp);
}

}  // namespace

bool matches(const std::string& pattern, const std::string& path) {
  const std::vector<std::string> p = components(pattern), n = components(path);
  if (p.size() != n.size()) return false;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] != "*" && p[i] != n[i]) return false;
  }
  return true;
}

void parallelize_module(nn::Module& model, const DeviceMesh& tp_mesh, const Plan& plan) {
  const auto modules = model.named_modules();
  // Every pattern must name something before anything is split.
  for (const PlanEntry& entry : plan) {
    SPMD_CHECK(entry.style != nullptr, "parallelize_module: the entry \"", entry.pattern,
               "\" has no style");
    bool found = false;
    for (const auto& [name, m] : modules) found = found || matches(entry.pattern, name);
    SPMD_CHECK(found, "parallelize_module: the pattern \"", entry.pattern, "\" (",
               entry.style->name(), ") matches no module of this ", model.type_name());
  }
  for (const PlanEntry& entry : plan) {
    for (const auto& [name, m] : modules) {
      if (matches(entry.pattern, name)) entry.style->apply(*m, name, tp_mesh);
    }
  }
}

Plan transformer_plan(const nn::TransformerConfig& c, int64_t tp, bool sp) {
  SPMD_CHECK(tp >= 1, "tensor parallel: tp must be at least 1, got ", tp);
  const int64_t kv_heads = c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads;
  check_divides(c.n_heads, tp, "the number of attention heads");
  check_divides(kv_heads, tp, "the number of key/value heads");
  check_divides(c.hidden_dim(), tp, "the FFN width");
  check_divides(c.vocab_size, tp, "the vocabulary");
  const int64_t head_dim = c.d_model / c.n_heads;
  const Layout between = sp ? Layout::kShardSeq : Layout::kReplicate;  // the residual stream
  using In = ColwiseParallel::Input;

  Plan plan;
  plan.push_back({"tok_embeddings", style(VocabParallelEmbedding(between))});
  if (sp && c.positions == nn::TransformerConfig::Positions::kLearned)
    plan.push_back({"pos_embeddings", style(SequenceParallelPositions())});
  if (sp) plan.push_back({"dropout", style(SequenceParallelDropout())});

  // Attention: whole heads per rank.
  if (sp) plan.push_back({"layers.*.attn_norm", style(SequenceParallel())});
  plan.push_back({"layers.*.attn", style(PrepareModuleInput(between))});
  if (c.fused_qkv) {
    const std::vector<int64_t> qkv{c.n_heads * head_dim, kv_heads * head_dim, kv_heads * head_dim};
    plan.push_back(
        {"layers.*.attn.wqkv", style(ColwiseParallel({.input = In::kPrepared, .segments = qkv}))});
  } else {
    for (const char* w : {"layers.*.attn.wq", "layers.*.attn.wk", "layers.*.attn.wv"})
      plan.push_back({w, style(ColwiseParallel({.input = In::kPrepared}))});
  }
  plan.push_back({"layers.*.attn.wo", style(RowwiseParallel({.output = between}))});
  if (sp) plan.push_back({"layers.*.resid_dropout", style(SequenceParallelDropout())});

  // MLP: a slice of the hidden units per rank.
  if (sp) plan.push_back({"layers.*.ffn_norm", style(SequenceParallel())});
  plan.push_back({"layers.*.mlp", style(PrepareModuleInput(between))});
  plan.push_back({"layers.*.mlp.w1", style(ColwiseParallel({.input = In::kPrepared}))});
  if (c.activation == nn::TransformerConfig::Activation::kSwiGLU)
    plan.push_back({"layers.*.mlp.w3", style(ColwiseParallel({.input = In::kPrepared}))});
  plan.push_back({"layers.*.mlp.w2", style(RowwiseParallel({.output = between}))});

  // The head: vocab-sharded logits, for vocab_parallel_cross_entropy.
  if (sp) plan.push_back({"norm", style(SequenceParallel())});
  if (c.tie_embeddings) {
    // logits = x E^T with this rank's rows of E (already sharded above).
    plan.push_back({"norm", style(PrepareModuleOutput(between))});
  } else {
    plan.push_back(
        {"output", style(ColwiseParallel({.input = sp ? In::kShardSeq : In::kReplicate}))});
  }
  return plan;
}

TpCommVolume transformer_tp_comm_per_step(const nn::TransformerConfig& c, int64_t B, int64_t T,
                                          bool sp) {
  const uint64_t activation = uint64_t(B * T * c.d_model) * 4, L = uint64_t(c.n_layers);
  TpCommVolume v;
  auto add = [](CommStats::Count& count, uint64_t calls, uint64_t bytes_each) {
    count.calls += calls;
    count.bytes += calls * bytes_each;
  };
  if (!sp) {
    add(v.all_reduce, 1 + 4 * L + 1, activation);
  } else {
    // Each conversion at a region's edge, forward and backward.
    add(v.reduce_scatter, 1 + 2 * L + 2 * L + 1, activation);  // embedding, wo, w2, fwd / head bwd
    add(v.all_gather, 1 + 2 * L + 2 * L + 1, activation);
    const bool ln = c.norm == nn::TransformerConfig::Norm::kLayerNorm;
    const uint64_t norm_params = (ln && c.bias) ? 2 : 1, row_biases = c.bias ? 2 : 0;
    add(v.all_reduce, (2 * norm_params + row_biases) * L + norm_params, uint64_t(c.d_model) * 4);
    if (c.positions == nn::TransformerConfig::Positions::kLearned)
      add(v.all_gather, 1, uint64_t(T * c.d_model) * 4);
  }
  add(v.all_reduce, 1, uint64_t(B * T) * 4);      // row maxima
  add(v.all_reduce, 1, uint64_t(2 * B * T) * 4);  // sums of exp and target logits
  return v;
}

void parallelize_transformer(nn::Transformer& model, const DeviceMesh& tp_mesh, bool sp) {
  parallelize_module(model, tp_mesh, transformer_plan(model.config, tp_mesh.size(), sp));
}

}  // namespace spmd::dist::tp
