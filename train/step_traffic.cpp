// step_traffic(): the bytes a rank's non-product ops move in one step,
// block by block, then the ends of the model, the strategies' copies and
// the update (step_traffic.h; the table is docs/planner.md's "Memory
// traffic").
#include "train/step_traffic.h"

#include "autograd/nn/checkpoint_wrapper.h"
#include "autograd/nn/transformer.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage.h"

namespace spmd::train {
namespace {

// One token's pass through a block on one tp rank, in activation elements:
// forward, backward, and of the forward what selective "op" reruns. The
// stream_ fields are the residual stream's share (the norms and the
// residual adds), kept in f32 under bf16 autocast.
struct BlockTraffic {
  double forward = 0, backward = 0, cheap_forward = 0;
  double stream_forward = 0, stream_backward = 0, stream_cheap_forward = 0;
  double bytes(double act, Rerun rerun) const {
    const double again = rerun == Rerun::kAll        ? forward
                         : rerun == Rerun::kCheapOps ? cheap_forward
                                                     : 0;
    const double stream_again = rerun == Rerun::kAll        ? stream_forward
                                : rerun == Rerun::kCheapOps ? stream_cheap_forward
                                                            : 0;
    return act * (forward + backward + again) +
           4 * (stream_forward + stream_backward + stream_again);
  }
};

BlockTraffic block_traffic(const nn::TransformerConfig& t, const ParallelConfig& p, bool moe) {
  const double tp = double(p.tp), C = double(t.d_model);
  const double D = C / double(t.n_heads);
  const double kv = double(t.n_kv_heads > 0 ? t.n_kv_heads : t.n_heads);
  const double A = C / tp, Akv = kv * D / tp;  // this rank's heads: q (and the output), k, v
  // Norms and residual adds see every row of the rank's tokens, a tp
  // rank's share of them under sequence parallelism.
  const double rows = p.tp > 1 && p.sequence_parallel ? 1 / tp : 1;
  const bool swiglu = t.activation == nn::TransformerConfig::Activation::kSwiGLU;
  const bool rope = t.positions == nn::TransformerConfig::Positions::kRope;
  BlockTraffic b;
  // Two norms (read x, write y; back: read dy and x, write dx) and two
  // residual adds (read two, write one; back: the same).
  b.stream_forward = 2 * 2 * C * rows + 2 * 3 * C * rows;
  b.stream_cheap_forward = 2 * 2 * C * rows;
  b.stream_backward = 2 * 3 * C * rows + 2 * 3 * C * rows;
  // Attention's head layout: each of q, k, v copied into (heads, T, D) and
  // the output back (read and write), forward and backward. RoPE writes q
  // and k in that layout as it rotates them (read x, write out).
  const double layout = rope ? 2 * Akv + 2 * A : 2 * A + 4 * Akv + 2 * A;
  b.forward += layout, b.backward += layout;
  if (rope)
    b.forward += 2 * (A + Akv), b.backward += 2 * (A + Akv), b.cheap_forward += 2 * (A + Akv);
  // x's gradient summed over the projections that read it: q, k and v
  // apart (not fused, or under tp), SwiGLU's w1 and w3.
  if (!t.fused_qkv || p.tp > 1) b.backward += 2 * 3 * C;  // tp splits a fused one apart
  if (swiglu) b.backward += 3 * C;
  // tp's collectives copy the rows they move (parallel/functional.cpp): an
  // all_reduce sums a copy of its input, two a pass; under sequence
  // parallelism two all_gathers and two reduce_scatters a pass, each with
  // one copy of the full rows (the pieces side by side along the sequence).
  if (p.tp > 1) {
    const double copies = (p.sequence_parallel ? 4 : 2) * 2 * C;
    b.forward += copies, b.backward += copies;
  }
  // Ring attention (parallel/context_parallel/ring_attention.cpp) merges
  // each block of keys' partial output into the running one, copies K and
  // V into the ring's buffers and, back, sums their gradients as they come
  // round: counted from the dry run's ops, 20 + 36 cp elements of the
  // rank's heads a token, forward and backward, half each way.
  if (p.cp > 1) {
    const double ring = (20 + 36 * double(p.cp)) * A;
    b.forward += ring / 2, b.backward += ring / 2;
  }
  // The MLP, of `width` on this rank: GELU (read, write; back: read dy and
  // the input, write) or SwiGLU (silu, then its product with w3's output).
  const double H = double(t.hidden_dim());
  const double width = moe ? H : H / tp;  // an MoE block's experts run whole on every tp rank
  const double copies = moe ? double(t.moe_top_k) : 1;  // a token's rows through the experts
  double mlp_f = swiglu ? 5 * width : 2 * width, mlp_b = swiglu ? 9 * width : 3 * width;
  // Biases: added to each product's output (a broadcast copy: read and
  // write), and summed over the rows for their gradient (read dy). Column-
  // parallel products (q, k, v; w1, w3) have this rank's columns, row-
  // parallel ones (the output projection, w2) all C of the rank's rows.
  // Under tp a row-parallel bias is added to the reduced rows in place,
  // with no copy.
  if (t.bias) {
    const double attention = A + 2 * Akv + C * rows, mlp = (swiglu ? 2 : 1) * width + C * rows;
    const double in_place = p.tp > 1 ? C * rows : 0;
    b.forward += 2 * (attention - in_place), b.backward += attention;
    mlp_f += 2 * (mlp - in_place), mlp_b += mlp;
  }
  b.cheap_forward += copies * (swiglu ? 5 * width : 2 * width);
  b.forward += copies * mlp_f, b.backward += copies * mlp_b;
  // An MoE block's routing: the router's softmax and top-k, each token's k
  // rows gathered for their experts and scattered back weighted, forward
  // and backward: counted from the dry run's ops, 31 C per routed copy for
  // Llama's SwiGLU experts and 42 C for GPT-2's GELU ones with biases,
  // taken as 36 C.
  if (moe) b.forward += 18 * copies * C, b.backward += 18 * copies * C;
  return b;
}

}  // namespace

bool is_moe_block(const nn::TransformerConfig& t, int64_t b) {
  return t.n_experts > 0 && b % t.moe_every == 0;
}

Rerun rerun_of(const TrainConfig& config, int64_t b) {
  if (config.training.activation_checkpointing == "none") return Rerun::kNone;
  const nn::CheckpointOptions o = checkpoint_options(config.training);
  if ((b + 1) % o.every != 0) return Rerun::kNone;
  return o.policy == autograd::CheckpointPolicy::kRecomputeAll ? Rerun::kAll : Rerun::kCheapOps;
}

double dense_parameters(const TrainConfig& config, const MemoryPlan& plan) {
  const ParallelConfig& p = config.parallel;
  return p.dp_shard > 1 ? double(plan.gradients - plan.experts) / 4 * double(p.dp_shard * p.cp)
                        : double(plan.parameters - plan.experts) / 4;
}

std::vector<std::vector<int64_t>> blocks_of_pipeline_ranks(const TrainConfig& config) {
  const ParallelConfig& p = config.parallel;
  const int64_t L = config.model.n_layers;
  std::vector<std::vector<int64_t>> out(size_t(p.pp));
  if (p.pp == 1) {
    for (int64_t b = 0; b < L; ++b) out[0].push_back(b);
    return out;
  }
  const int v = int(p.pp_stages_per_rank), stages = int(p.pp) * v;
  std::vector<int64_t> starts = dist::pp::split_layers_interleaved(L, int(p.pp), v);
  starts.insert(starts.begin(), 0);
  starts.push_back(L);
  for (int s = 0; s < stages; ++s)
    for (int64_t b = starts[size_t(s)]; b < starts[size_t(s) + 1]; ++b)
      out[size_t(s % p.pp)].push_back(b);
  return out;
}

StepTraffic step_traffic(const TrainConfig& config, const MemoryPlan& plan, int64_t pp_rank) {
  const ParallelConfig& p = config.parallel;
  const nn::TransformerConfig t = transformer_config(config.model);
  const double act = config.training.mixed_precision == "bf16" ? 2 : 4;
  const int64_t m =
      p.pp > 1 ? (p.pp_microbatches > 0 ? p.pp_microbatches : p.pp) : config.training.microbatches;
  const double tokens = double(config.training.global_batch / (p.dp_replicate * p.dp_shard)) *
                        double(t.max_seq_len) / double(p.cp);  // the step's, all microbatches
  const double C = double(t.d_model), tp = double(p.tp);
  double per_token = 0;  // bytes
  const std::vector<std::vector<int64_t>> ranks = blocks_of_pipeline_ranks(config);
  for (int64_t b : ranks[size_t(pp_rank)])
    per_token += block_traffic(t, p, is_moe_block(t, b)).bytes(act, rerun_of(config, b));
  // The ends. The embedding's lookup (write; back: read) and learned
  // positions' add (and their gradient's sum over the batch); the final
  // norm, and the loss over the logits: read; back: read, write (the
  // vocabulary-parallel loss over tp composes about ten passes of V / tp).
  if (pp_rank == 0) per_token += act * (2 * C + (t.positions == t.Positions::kLearned ? 4 * C : 0));
  if (pp_rank == p.pp - 1) {
    const double V = double(t.vocab_size);
    per_token += 4 * 5 * C + act * (p.tp > 1 ? 10 * V / tp : 3 * V);
  }
  StepTraffic out;
  out.passes = per_token * tokens;

  // The strategies' copies of the rank's dense parameters (before FSDP cuts
  // them, as step_time's collectives count them). FSDP's all_gathers: the
  // shard into the send buffer, the gathered unit out to the parameters;
  // its reduce_scatter's input. DDP's buckets, filled from the gradients
  // and read back, 4 + 4 bytes each way. Under a pipeline or ep, which
  // reduce once after the step, dist::average_gradients instead: through
  // its buckets (copied in, scaled, copied back: 24), or in place for a
  // gradient as large as a bucket, or with no copies to average with
  // (scaled: 8). Gradients accumulate over the step's microbatches, the
  // reduction held off until the last: where FSDP's or DDP's buffers hold
  // them, 12 bytes (read two, write one) a parameter for each microbatch
  // after the first (elsewhere the weight-gradient GEMM adds into the
  // gradient itself). ep averages the experts' gradients the same way.
  const int64_t fsdp = p.dp_shard * p.cp;
  const double dense = dense_parameters(config, plan);
  const bool after_step = p.pp > 1;
  const bool ddp_hooks = p.pp == 1 && p.ep == 1;
  const auto averaged = [](double bytes, double in_place, int64_t copies) {
    return copies == 1 ? bytes / 4 * 8 : (bytes - in_place) / 4 * 24 + in_place / 4 * 8;
  };
  if (p.dp_shard > 1) {
    const bool split_backward =
        p.pp > 1 && dist::pp::splits_backward(dist::pp::parse_schedule(p.pp_schedule));
    const double gathers = p.fsdp_reshard_after_forward && !split_backward ? 2 * double(m) : 1;
    out.passes += dense * gathers * (8 + 8 / double(fsdp));
    (after_step ? out.update : out.passes) += dense * 8;
  } else if (p.dp_replicate * p.cp > 1) {
    if (ddp_hooks) {
      out.passes += dense * 16;
    } else {
      out.update += averaged(dense * 4, double(plan.in_place), p.dp_replicate * p.cp);
    }
  }
  const bool accumulates = p.dp_shard > 1 || (p.dp_replicate * p.cp > 1 && ddp_hooks);
  if (accumulates) out.passes += dense * 12 * double(m - 1);
  // The embedding's gradient is a dense (V / tp, C) table that each
  // microbatch's backward fills with zeros and adds its rows into, then
  // adds to the microbatches' before it: 4 bytes an element a microbatch,
  // and 12 for each after the first where no buffer's accumulation above
  // counts it.
  if (pp_rank == 0) {
    const double table = double(t.vocab_size) / tp * C;
    out.passes += table * 4 * double(m) + (accumulates ? 0 : table * 12 * double(m - 1));
  }
  if (p.ep > 1)
    out.update += averaged(double(plan.experts), double(plan.experts_in_place),
                           p.dp_replicate * p.dp_shard * p.cp / p.ep);
  // After the backwards, per parameter of the rank: the gradient norm
  // (optim::local_grad_sq_sum: the gradient to f64, 4 + 8 bytes; squared,
  // 8 + 8 + 8; summed, 8), AdamW (reads the parameter, gradient and two
  // moments, writes three: 28), and the clip's scaling when it clips (8).
  const double params = double(plan.parameters) / 4;
  out.update += params * (44 + 28);
  if (config.training.grad_clip > 0) out.clip = params * 8, out.update += out.clip;
  return out;
}

}  // namespace spmd::train
