// Pipeline stages of the Transformer: where the cuts go, and each stage's
// share of Transformer::forward.
#include "parallel/pipeline/stage.h"

#include <algorithm>

#include "autograd/tensor_ops.h"
#include "tensor/ops.h"

namespace spmd::dist::pp {

TransformerStage::TransformerStage(std::shared_ptr<nn::Transformer> model, int index,
                                   int num_stages, int64_t first_layer, int64_t end_layer)
    : model_(std::move(model)),
      index_(index),
      num_stages_(num_stages),
      first_layer_(first_layer),
      end_layer_(end_layer) {
  SPMD_CHECK(model_ != nullptr, "TransformerStage: no model");
  SPMD_CHECK(index >= 0 && index < num_stages, "TransformerStage: stage ", index, " is not in [0, ",
             num_stages, ")");
  SPMD_CHECK(first_layer >= 0 && first_layer <= end_layer && end_layer <= model_->config.n_layers,
             "TransformerStage: blocks [", first_layer, ", ", end_layer, ") of a model of ",
             model_->config.n_layers);
}

Tensor TransformerStage::forward(const Tensor& input) {
  if (module_) return (*module_)(input);
  nn::Transformer& m = *model_;
  Tensor x = input;
  if (is_first()) {
    SPMD_CHECK(x.ndim() == 2 && !is_floating(x.dtype()), "pipeline stage 0: expected integer ",
               "ids (b, T), got ", dtype_name(x.dtype()), " ", x.shape());
    const int64_t T = x.size(1);
    x = (*m.tok_embeddings)(x);  // (b, T, C)
    if (m.pos_embeddings)
      x = add(x, (*m.pos_embeddings)(ops::arange(T, {DType::kI64, x.device()})));
    x = (*m.dropout)(x);
  } else {
    SPMD_CHECK(x.ndim() == 3 && x.size(2) == m.config.d_model, "pipeline stage ", index_,
               ": expected activations (b, T, ", m.config.d_model, "), got ", x.shape());
  }
  for (int64_t i = first_layer_; i < end_layer_; ++i) x = (*m.layers->at(size_t(i)))(x);
  if (!is_last()) return x;  // (b, T, C)
  x = (*m.norm)(x);
  if (m.output) return (*m.output)(x);  // (b, T, V)
  return linear(x, m.tok_embeddings->weight);
}

namespace {

// The blocks of a stage, each under its index in the model ("3"), so that
// the stage module's names are the model's ("layers.3.attn.wq.weight").
class StageBlocks : public nn::Module {
 public:
  StageBlocks(const nn::Transformer& model, int64_t first, int64_t end) {
    for (int64_t i = first; i < end; ++i)
      register_module(std::to_string(i), model.layers->at(size_t(i)));
  }
  Tensor forward(const Tensor&) override {
    SPMD_THROW(InvalidArgument, "StageBlocks: run through the stage, not on its own");
  }
  std::string type_name() const override { return "StageBlocks"; }
};

// as_module()'s module: the stage's modules as children, the stage's forward
// (run by a copy of the stage made before it had a module, which computes).
class StageModule : public nn::Module {
 public:
  explicit StageModule(const TransformerStage& stage) : stage_(stage) {
    const nn::Transformer& m = stage.model();
    if (stage.is_first()) {
      register_module("tok_embeddings", m.tok_embeddings);
      if (m.pos_embeddings) register_module("pos_embeddings", m.pos_embeddings);
      register_module("dropout", m.dropout);
    }
    register_module("layers",
                    std::make_shared<StageBlocks>(m, stage.first_layer(), stage.end_layer()));
    if (stage.is_last()) {
      register_module("norm", m.norm);
      if (m.output) register_module("output", m.output);
    }
  }
  Tensor forward(const Tensor& x) override { return stage_.forward(x); }
  std::string type_name() const override { return "TransformerStage"; }

 private:
  TransformerStage stage_;
};

}  // namespace

std::shared_ptr<nn::Module> TransformerStage::as_module() {
  if (!module_) module_ = std::make_shared<StageModule>(*this);
  return module_;
}

namespace {

// Which stage-owned piece a parameter of the model belongs to: the block
// index for "layers.N.*", or -1 with the top-level module's name in `top`.
int64_t block_of(const std::string& name, std::string& top) {
  const size_t dot = name.find('.');
  top = name.substr(0, dot);
  if (top != "layers") return -1;
  const size_t next = name.find('.', dot + 1);
  return std::stoll(name.substr(dot + 1, next - dot - 1));
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> TransformerStage::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, p] : model_->named_parameters()) {
    std::string top;
    const int64_t block = block_of(name, top);
    const bool mine = block >= 0 ? (block >= first_layer_ && block < end_layer_)
                      : (top == "tok_embeddings" || top == "pos_embeddings")
                          ? is_first()
                          : is_last();  // norm, output
    if (mine) out.emplace_back(name, p);
  }
  return out;
}

std::vector<Tensor> TransformerStage::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

// --- Where to cut ------------------------------------------------------------------------

std::vector<int64_t> split_layers(int64_t num_layers, int num_stages,
                                  const std::vector<std::string>& split_points) {
  SPMD_CHECK(num_stages >= 1, "pipeline: the number of stages must be at least 1, got ",
             num_stages);
  SPMD_CHECK(num_stages <= num_layers, "pipeline: ", num_stages, " stages for a model of ",
             num_layers, " blocks; every stage needs at least one");
  std::vector<int64_t> starts;
  if (split_points.empty()) {  // even, the earlier stages one more when it does not divide
    int64_t at = 0;
    for (int s = 0; s + 1 < num_stages; ++s) {
      at += num_layers / num_stages + (s < num_layers % num_stages ? 1 : 0);
      starts.push_back(at);
    }
    return starts;
  }
  SPMD_CHECK(int(split_points.size()) == num_stages - 1, "pipeline: ", split_points.size(),
             " split points for ", num_stages, " stages (one fewer is needed)");
  for (const std::string& point : split_points) {
    int64_t block = -1;
    if (point.rfind("layers.", 0) == 0 && point.size() > 7 &&
        std::all_of(point.begin() + 7, point.end(), ::isdigit))
      block = std::stoll(point.substr(7));
    SPMD_CHECK(block >= 1 && block < num_layers, "pipeline: the split point \"", point,
               "\" names no block a stage can start at (layers.1 .. layers.", num_layers - 1, ")");
    SPMD_CHECK(starts.empty() || block > starts.back(), "pipeline: the split point \"", point,
               "\" does not come after the one before it");
    starts.push_back(block);
  }
  return starts;
}

namespace {

// Stage `index` of `num_stages` of `model`, the stages starting at `starts`
// (split_layers' cut).
TransformerStage stage_at(std::shared_ptr<nn::Transformer> model, int index, int num_stages,
                          const std::vector<int64_t>& starts) {
  SPMD_CHECK(num_stages == 1 || !model->config.tie_embeddings, "split_model: the head is tied ",
             "to the embedding (tie_embeddings), which would span the first and the last of ",
             num_stages, " stages; untie it to pipeline this model");
  SPMD_CHECK(index >= 0 && index < num_stages, "split_model: stage ", index, " is not in [0, ",
             num_stages, ")");
  const int64_t first = index == 0 ? 0 : starts[size_t(index - 1)];
  const int64_t end = index + 1 == num_stages ? model->config.n_layers : starts[size_t(index)];
  return TransformerStage(std::move(model), index, num_stages, first, end);
}

}  // namespace

TransformerStage split_model(std::shared_ptr<nn::Transformer> model, int index, int num_stages,
                             const std::vector<std::string>& split_points) {
  SPMD_CHECK(model != nullptr, "split_model: no model");
  const int64_t n_layers = model->config.n_layers;
  return stage_at(std::move(model), index, num_stages,
                  split_layers(n_layers, num_stages, split_points));
}

std::vector<int64_t> split_layers_interleaved(int64_t num_layers, int num_ranks,
                                              int stages_per_rank) {
  SPMD_CHECK(num_ranks >= 1 && stages_per_rank >= 1, "pipeline: ", num_ranks, " ranks x ",
             stages_per_rank, " stages per rank; at least 1 x 1 is needed");
  const int S = num_ranks * stages_per_rank;
  std::vector<int64_t> starts = split_layers(num_layers, S);  // checks S <= num_layers
  const int64_t base = num_layers / S, extra = num_layers % S;
  if (stages_per_rank == 1 || extra == 0) return starts;
  // The window of `extra` stages that take base + 1 blocks: the middle one, or
  // of the two middle ones the one with more of its stages on rank 0.
  auto on_rank0 = [&](int64_t k) {
    int64_t n = 0;
    for (int64_t s = k; s < k + extra; ++s) n += s % num_ranks == 0 ? 1 : 0;
    return n;
  };
  const int64_t lo = (S - extra) / 2, hi = (S - extra + 1) / 2;
  const int64_t first_heavy = on_rank0(hi) > on_rank0(lo) ? hi : lo;
  int64_t at = 0;
  for (int s = 0; s + 1 < S; ++s) {
    at += base + (s >= first_heavy && s < first_heavy + extra ? 1 : 0);
    starts[size_t(s)] = at;
  }
  return starts;
}

std::vector<TransformerStage> split_model_interleaved(
    std::shared_ptr<nn::Transformer> model, int rank, int num_ranks, int stages_per_rank,
    const std::vector<std::string>& split_points) {
  SPMD_CHECK(num_ranks >= 1 && rank >= 0 && rank < num_ranks, "split_model_interleaved: rank ",
             rank, " of ", num_ranks);
  SPMD_CHECK(stages_per_rank >= 1, "split_model_interleaved: ", stages_per_rank,
             " stages per rank; at least 1 is needed");
  SPMD_CHECK(model != nullptr, "split_model_interleaved: no model");
  const int S = num_ranks * stages_per_rank;
  const int64_t n_layers = model->config.n_layers;
  const std::vector<int64_t> starts =
      split_points.empty() ? split_layers_interleaved(n_layers, num_ranks, stages_per_rank)
                           : split_layers(n_layers, S, split_points);
  std::vector<TransformerStage> stages;
  for (int i = 0; i < stages_per_rank; ++i)
    stages.push_back(stage_at(model, rank + i * num_ranks, S, starts));
  return stages;
}

}  // namespace spmd::dist::pp
