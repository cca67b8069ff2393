// plan_memory(): every parameter of the model by name and shape, cut as each
// strategy of the layout cuts it on this rank; then the activations per
// microbatch, and how many microbatches the schedule holds at once.
#include "train/memory_plan.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "autograd/nn/checkpoint_wrapper.h"
#include "autograd/nn/transformer.h"
#include "parallel/ddp/gradient_average.h"
#include "parallel/device_mesh.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage.h"
#include "parallel/placement.h"

namespace spmd::train {
namespace {

using Dims = std::vector<int64_t>;
constexpr uint64_t kF32 = 4;

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

// One parameter of the model as this rank holds it.
struct Piece {
  std::string name;
  Dims whole;          // the model's shape
  Dims local;          // this rank's piece after tp and ep, before FSDP
  int64_t block = -1;  // layers.<block>; -1: embeddings, norm, head
  bool expert = false;
  int64_t held = 0;  // elements of the storage the piece keeps alive (see local_pieces)
};

// The model's parameters, in its registration order, with its names
// (checked against nn::Transformer's by tests/train/test_memory_plan.cpp).
std::vector<Piece> model_parameters(const nn::TransformerConfig& c) {
  using Cfg = nn::TransformerConfig;
  std::vector<Piece> out;
  int64_t block = -1;
  const auto add = [&](const std::string& name, Dims shape, bool expert = false) {
    out.push_back({name, shape, shape, block, expert, numel(shape)});
  };
  const auto linear = [&](const std::string& name, int64_t in, int64_t n_out, bool bias) {
    add(name + ".weight", {n_out, in});
    if (bias) add(name + ".bias", {n_out});
  };
  const int64_t C = c.d_model, V = c.vocab_size, F = c.hidden_dim(), E = c.n_experts;
  const int64_t D = C / c.n_heads, kv = (c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads) * D;
  const bool layer_norm = c.norm == Cfg::Norm::kLayerNorm;
  const bool swiglu = c.activation == Cfg::Activation::kSwiGLU;
  const auto norm = [&](const std::string& name) {
    add(name + ".weight", {C});
    if (layer_norm && c.bias) add(name + ".bias", {C});
  };

  add("tok_embeddings.weight", {V, C});
  if (c.positions == Cfg::Positions::kLearned) add("pos_embeddings.weight", {c.max_seq_len, C});
  for (block = 0; block < c.n_layers; ++block) {
    const std::string p = "layers." + std::to_string(block) + ".";
    norm(p + "attn_norm");
    if (c.fused_qkv) {
      linear(p + "attn.wqkv", C, c.n_heads * D + 2 * kv, c.bias);
    } else {
      linear(p + "attn.wq", C, c.n_heads * D, c.bias);
      linear(p + "attn.wk", C, kv, c.bias);
      linear(p + "attn.wv", C, kv, c.bias);
    }
    linear(p + "attn.wo", c.n_heads * D, C, c.bias);
    norm(p + "ffn_norm");
    if (E > 0 && block % c.moe_every == 0) {
      linear(p + "moe.router", C, E, false);
      add(p + "moe.w1", {E, F, C}, true);
      if (c.bias) add(p + "moe.b1", {E, F}, true);
      add(p + "moe.w2", {E, C, F}, true);
      if (c.bias) add(p + "moe.b2", {E, C}, true);
      if (swiglu) add(p + "moe.w3", {E, F, C}, true);
      if (swiglu && c.bias) add(p + "moe.b3", {E, F}, true);
    } else {
      linear(p + "mlp.w1", C, F, c.bias);
      linear(p + "mlp.w2", F, C, c.bias);
      if (swiglu) linear(p + "mlp.w3", C, F, c.bias);
    }
  }
  block = -1;
  norm("norm");
  if (!c.tie_embeddings) linear("output", C, V, false);
  return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The dim tensor parallelism splits (parallel/tensor_parallel/plan.cpp's
// transformer_plan: the embedding and the head by vocabulary rows,
// column-parallel weights and biases by rows, row-parallel weights by
// columns), or -1 for a parameter every tp rank holds whole (norms,
// positions, row-parallel biases, MoE blocks).
int tp_split_dim(const Piece& p) {
  const std::string& n = p.name;
  if (n == "tok_embeddings.weight" || n == "output.weight") return 0;
  if (n.find(".moe.") != std::string::npos) return -1;
  for (const char* col :
       {".attn.wqkv.", ".attn.wq.", ".attn.wk.", ".attn.wv.", ".mlp.w1.", ".mlp.w3."})
    if (n.find(col) != std::string::npos) return 0;
  if (ends_with(n, ".attn.wo.weight") || ends_with(n, ".mlp.w2.weight")) return 1;
  return -1;
}

// Where this rank sits: its mesh coordinates and its pipeline stages.
struct Place {
  int64_t pp = 0, dp_replicate = 0, dp_shard = 0, cp = 0, tp = 0;
  std::vector<int> stages;      // global stage indices
  std::vector<int64_t> starts;  // each stage's first block, of pp x stages_per_rank
  int num_stages = 1;
  int64_t fsdp_index = 0, fsdp_size = 1;  // this rank's chunk of dp_shard (x cp)
};

Place place_of(const TrainConfig& config, int64_t rank) {
  const ParallelConfig& p = config.parallel;
  const Dims c = dist::mesh_coordinate({p.pp, p.dp_replicate, p.dp_shard, p.cp, p.tp}, rank);
  Place at;
  at.pp = c[0], at.dp_replicate = c[1], at.dp_shard = c[2], at.cp = c[3], at.tp = c[4];
  const int v = int(p.pp_stages_per_rank);
  at.num_stages = int(p.pp) * v;
  at.starts = dist::pp::split_layers_interleaved(config.model.n_layers, int(p.pp), v);
  at.starts.insert(at.starts.begin(), 0);
  at.starts.push_back(config.model.n_layers);
  for (int i = 0; i < v; ++i) at.stages.push_back(int(at.pp) + i * int(p.pp));
  at.fsdp_size = p.dp_shard * p.cp;
  at.fsdp_index = at.dp_shard * p.cp + at.cp;
  return at;
}

// Whether a parameter lives on one of this rank's stages.
bool on_stages(const Piece& piece, const Place& at) {
  for (int s : at.stages) {
    if (piece.block >= 0 && piece.block >= at.starts[size_t(s)] &&
        piece.block < at.starts[size_t(s) + 1])
      return true;
    const bool embedding = piece.name.starts_with("tok_") || piece.name.starts_with("pos_");
    if (piece.block < 0 && (embedding ? s == 0 : s == at.num_stages - 1)) return true;
  }
  return false;
}

// model_parameters() of `model`, kept from the last call on this thread:
// largest_plan() plans a rank of each stage, and spmd-plan's search
// thousands of layouts, all of one model.
const std::vector<Piece>& parameters_of(const ModelConfig& model) {
  thread_local std::optional<ModelConfig> key;
  thread_local std::vector<Piece> last;
  if (!key || !(*key == model)) {
    last = model_parameters(transformer_config(model));
    key = model;
  }
  return last;
}

// The model's pieces on this rank, tp- and ep-local.
std::vector<Piece> local_pieces(const TrainConfig& config, const Place& at, bool mine) {
  const ParallelConfig& p = config.parallel;
  std::vector<Piece> out;
  for (const Piece& whole : parameters_of(config.model)) {
    if (on_stages(whole, at) != mine) continue;
    Piece piece = whole;
    const int dim = p.tp > 1 ? tp_split_dim(piece) : -1;
    if (dim >= 0) piece.local[size_t(dim)] /= p.tp;
    if (piece.expert && p.ep > 1) piece.local[0] /= p.ep;
    piece.held = numel(piece.local);  // tensor_parallel/style.cpp's shard() copies its piece
    out.push_back(piece);
  }
  return out;
}

// A piece's FSDP chunk (rows of dim 0 for this rank) and the full chunk the
// flat buffers pad it to, in elements.
struct Chunked {
  int64_t mine, padded;
};
Chunked fsdp_chunk(const Piece& piece, const Place& at) {
  const int64_t rows = piece.local[0], row = numel(piece.local) / std::max<int64_t>(rows, 1);
  const dist::Chunk c = dist::chunk_bounds(rows, at.fsdp_size, at.fsdp_index);
  return {c.length * row, (rows + at.fsdp_size - 1) / at.fsdp_size * row};
}

// FSDP's units held whole at once (see memory_plan.h): unit -1 is the root.
// With training.mixed_precision = "bf16" the units gather bf16 parameters,
// whose full gradients are bf16 too.
uint64_t gathered_bytes(const TrainConfig& config, const std::vector<Piece>& pieces) {
  const ParallelConfig& p = config.parallel;
  const uint64_t element = config.training.mixed_precision == "bf16" ? 2 : kF32;
  std::map<int64_t, uint64_t> unit;  // block (or -1) -> bytes of its full parameters
  for (const Piece& piece : pieces)
    if (!piece.expert) unit[piece.block] += uint64_t(numel(piece.local)) * element;
  uint64_t root = unit.count(-1) ? unit[-1] : 0, largest = 0, blocks = 0;
  for (const auto& [block, bytes] : unit)
    if (block >= 0) largest = std::max(largest, bytes), blocks += bytes;
  const bool split_backward =
      p.pp > 1 && dist::pp::splits_backward(dist::pp::parse_schedule(p.pp_schedule));
  const bool params_all = !p.fsdp_reshard_after_forward || split_backward;
  const uint64_t params = root + (params_all ? blocks : 2 * largest);
  const uint64_t grads = root + (p.pp > 1 ? blocks : 2 * largest);  // pp: summed till the end
  return params + grads;
}

// --- Activations ------------------------------------------------------------------------

// Bytes per token that one block's forward leaves saved for its backward
// (docs/train.md counts them op by op). `stream`: the share of the residual
// stream a rank keeps (1/tp under sequence parallelism, else 1). `half`:
// the bytes of an element autocast computes in (2 under bf16, else 4); the
// residual stream and the statistics stay f32.
double block_bytes(const nn::TransformerConfig& c, int64_t tp, double stream, bool moe,
                   double half) {
  using Cfg = nn::TransformerConfig;
  const double C = double(c.d_model), F = double(c.hidden_dim()), H = double(c.n_heads);
  const double kv = double(c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads) * (C / H);
  const bool swiglu = c.activation == Cfg::Activation::kSwiGLU;
  const bool layer_norm = c.norm == Cfg::Norm::kLayerNorm;
  // Whole on every tp rank: the two norms' outputs (the projections' saved
  // inputs, gathered whole under sequence parallelism); the residual stream
  // after attention and after the MLP; the norms' statistics.
  const double whole = 2 * C * half + stream * (2 * C + (layer_norm ? 4 : 2)) * kF32;
  // Split by tp: q (k, v) as attention saves them, its output (wo's input:
  // the heads merge as a view) and log-sum-exp; the MLP's hidden activations.
  const double attention = (C + 2 * kv + C) * half + H * kF32;
  const double mlp = (swiglu ? 4 * F : 2 * F) * half;
  if (!moe) return whole + (attention + mlp) / double(tp);
  // An MoE block runs whole on each tp rank: the router's logits and
  // probabilities, and per routed copy its input, hidden units and output.
  const double E = double(c.n_experts), k = double(c.moe_top_k);
  return whole + attention / double(tp) + 2 * E * kF32 + k * (2 * C * half + mlp);
}

// Bytes per token that a dense block keeps under selective checkpointing
// ("op"): its input, and the outputs of its products (autograd/checkpoint.h's
// kept list): q k v, the attention's output and log-sum-exp, wo's and w2's
// outputs (whole on every tp rank, before their reduction), the MLP's
// hidden pre-activations; the norms and activations are recomputed. An MoE
// block is counted as without checkpointing.
double block_bytes_selective(const nn::TransformerConfig& c, int64_t tp, double stream, bool moe,
                             double half) {
  if (moe) return block_bytes(c, tp, stream, moe, half);
  const double C = double(c.d_model), F = double(c.hidden_dim()), H = double(c.n_heads);
  const double kv = double(c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads) * (C / H);
  const bool swiglu = c.activation == nn::TransformerConfig::Activation::kSwiGLU;
  return stream * C * kF32 +
         ((C + 2 * kv + C + (swiglu ? 2 * F : F)) * half + H * kF32) / double(tp) + 2 * C * half;
}

// Bytes one microbatch of `rows` leaves saved on stage s (its blocks, and the
// embeddings or head around them), its logits (last stage), and, under
// checkpointing, the block its backward recomputes, held during that
// backward only (one microbatch's at a time, whatever the schedule keeps
// in flight).
struct StageBytes {
  uint64_t activations = 0, logits = 0, recompute = 0;
};
StageBytes stage_bytes(const TrainConfig& config, const Place& at, int s, int64_t rows) {
  const nn::TransformerConfig c = transformer_config(config.model);
  const ParallelConfig& p = config.parallel;
  const double tokens = double(rows) * double(c.max_seq_len / p.cp);
  const double stream = p.sequence_parallel ? 1.0 / double(p.tp) : 1.0;
  // Checkpointing, as parallelize() applies it (checkpoint_options): a
  // wrapped block keeps its input only, or under kSaveProducts its products'
  // outputs too; the wrapped blocks are those whose count from 1 divides by
  // `every`. A block recomputed in backward holds its whole set again meanwhile.
  const bool checkpointing = config.training.activation_checkpointing != "none";
  const nn::CheckpointOptions ac =
      checkpointing ? checkpoint_options(config.training) : nn::CheckpointOptions{};
  const bool products = ac.policy == autograd::CheckpointPolicy::kSaveProducts;
  const double half = config.training.mixed_precision == "bf16" ? 2 : kF32;
  double bytes =
      double(c.d_model) * stream * kF32;  // the stage's input (or the embeddings' output)
  double largest_block = 0;
  bool recomputes = false;
  for (int64_t b = at.starts[size_t(s)]; b < at.starts[size_t(s) + 1]; ++b) {
    const bool moe = c.n_experts > 0 && b % c.moe_every == 0;
    const double block = block_bytes(c, p.tp, stream, moe, half);
    largest_block = std::max(largest_block, block);
    if (!checkpointing || (b + 1) % ac.every != 0) {
      bytes += block;
    } else if (products) {
      bytes += block_bytes_selective(c, p.tp, stream, moe, half), recomputes = true;
    } else {
      bytes += double(c.d_model) * stream * kF32, recomputes = true;
    }
  }
  StageBytes out;
  if (recomputes) out.recompute = uint64_t(tokens * largest_block);
  if (s == at.num_stages - 1) {
    // The final norm's output (the head's input) and statistics.
    bytes += double(c.d_model) * half + 4 * kF32;
    out.logits = uint64_t(2 * tokens * double(c.vocab_size / p.tp)) * kF32;  // and the gradient
  }
  out.activations = uint64_t(tokens * bytes);
  return out;
}

// make_schedule's lists for every rank, kept from the last call on this
// thread: largest_plan() plans one rank of each stage, and spmd-plan's
// search thousands of layouts, mostly with the schedule of the call before.
const dist::pp::Schedule& schedule_of(dist::pp::ScheduleKind kind, int pp, int m, int v) {
  thread_local std::tuple<dist::pp::ScheduleKind, int, int, int> key{kind, 0, 0, 0};
  thread_local dist::pp::Schedule last;
  if (key != std::make_tuple(kind, pp, m, v)) {
    last = dist::pp::make_schedule(kind, pp, m, v);
    key = {kind, pp, m, v};
  }
  return last;
}

// The most bytes of activations (and of logits) the rank's stages hold at
// once: one microbatch without a pipeline; with one, walked through this
// rank's action list (a microbatch's tensors live from its forward to its
// backward, or to its weight pass when the backward is split; a recomputed
// block lives during its microbatch's backward).
void plan_activations(const TrainConfig& config, const Place& at, MemoryPlan& plan) {
  const ParallelConfig& p = config.parallel;
  const TrainingConfig& t = config.training;
  const int64_t m = p.pp > 1 ? (p.pp_microbatches > 0 ? p.pp_microbatches : p.pp) : 1;
  plan.microbatch_rows = t.global_batch / (p.dp_replicate * p.dp_shard) / t.microbatches / m;
  plan.tokens_per_row = config.model.seq_len / p.cp;
  if (p.pp == 1) {
    const StageBytes b = stage_bytes(config, at, 0, plan.microbatch_rows);
    plan.activations = b.activations + b.recompute, plan.logits = b.logits, plan.in_flight = 1;
    return;
  }
  const auto kind = dist::pp::parse_schedule(p.pp_schedule);
  const dist::pp::Schedule& actions =
      schedule_of(kind, int(p.pp), int(m), int(p.pp_stages_per_rank));
  const bool split = dist::pp::splits_backward(kind);
  std::set<std::pair<int, int>> live;  // (stage, microbatch)
  uint64_t act = 0, logits = 0;
  std::vector<std::optional<StageBytes>> stages(size_t(at.num_stages));  // each worked out once
  for (const dist::pp::Action& a : actions[size_t(at.pp)]) {
    std::optional<StageBytes>& known = stages[size_t(a.stage)];
    if (!known) known = stage_bytes(config, at, a.stage, plan.microbatch_rows);
    const StageBytes& b = *known;
    const bool ends =
        a.type == (split ? dist::pp::Action::Type::kWeight : dist::pp::Action::Type::kBackward);
    if (a.type == dist::pp::Action::Type::kForward) {
      live.insert({a.stage, a.microbatch});
      act += b.activations, logits += b.logits;
      plan.activations = std::max(plan.activations, act);
      plan.logits = std::max(plan.logits, logits);
      plan.in_flight = std::max<int64_t>(plan.in_flight, int64_t(live.size()));
    } else {
      const bool held = live.count({a.stage, a.microbatch}) > 0;
      if (a.type == dist::pp::Action::Type::kBackward && held)  // recomputes one block
        plan.activations = std::max(plan.activations, act + b.recompute);
      if (ends && held) {
        live.erase({a.stage, a.microbatch});
        act -= b.activations, logits -= b.logits;
      }
    }
  }
}

}  // namespace

MemoryPlan plan_memory(const TrainConfig& config, int64_t rank) {
  const ParallelConfig& p = config.parallel;
  const Place at = place_of(config, rank);
  MemoryPlan plan;
  plan.rank = rank;
  const bool fsdp = p.dp_shard > 1;
  const std::vector<Piece> mine = local_pieces(config, at, true);
  for (const Piece& piece : mine) {
    const uint64_t local = uint64_t(numel(piece.local)) * kF32;
    const bool sharded = fsdp && !piece.expert;  // FSDP's chunk is a copy
    const Chunked chunk = sharded ? fsdp_chunk(piece, at) : Chunked{};
    plan.parameters += sharded ? uint64_t(chunk.mine) * kF32 : uint64_t(piece.held) * kF32;
    if (piece.expert) plan.experts += uint64_t(piece.held) * kF32;
    plan.gradients += sharded ? uint64_t(chunk.padded) * kF32 : local;
    if (!sharded && int64_t(local) >= dist::kAverageBucketBytes)
      (piece.expert ? plan.experts_in_place : plan.in_place) += local;
    plan.optimizer += 2 * (sharded ? uint64_t(chunk.mine) * kF32 : local);  // AdamW's 2 moments
  }
  const bool ddp = !fsdp && p.ep == 1 && p.pp == 1 && (p.dp_replicate > 1 || p.cp > 1);
  if (ddp) plan.ddp_buckets = plan.gradients;
  if (fsdp) plan.gathered = gathered_bytes(config, mine);
  const bool staged = config.checkpoint.async && !config.checkpoint.folder.empty();
  if (staged) plan.staging = plan.parameters + plan.optimizer;  // f32, as the state is
  plan_activations(config, at, plan);

  // The model is built on the meta device: no rank holds it whole, nor the
  // other stages' parameters. The RoPE tables are built on every rank.
  const nn::TransformerConfig c = transformer_config(config.model);
  if (c.positions == nn::TransformerConfig::Positions::kRope)
    plan.buffers = uint64_t(c.n_layers * c.max_seq_len * (c.d_model / c.n_heads)) * kF32;
  return plan;
}

}  // namespace spmd::train
