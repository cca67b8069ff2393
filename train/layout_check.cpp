// check_layout(): a config's parallel dims against a world size, before any
// model or process group is built (config.h). Each failure names the dims
// and their values: the product against the world, then what each split
// must divide (the batch, the pipeline's stages and microbatches, heads,
// vocabulary and hidden dim over tp, the sequence over 2 x cp), ep's experts,
// and experts under tp (only beside dense blocks, without sequence parallel).
#include "autograd/nn/transformer.h"
#include "runtime/error.h"
#include "train/config.h"

namespace spmd::train {
namespace {

// The product of the dims against the world; ep's ranks and experts.
void check_ranks(const ParallelConfig& p, const ModelConfig& m, int world_size) {
  SPMD_CHECK(world_size >= 1, "check_layout: world_size must be at least 1, got ", world_size);
  const int64_t ranks = p.dp_replicate * p.dp_shard * p.cp * p.tp * p.pp;
  SPMD_CHECK(ranks == world_size, "parallel: dp_replicate ", p.dp_replicate, " x dp_shard ",
             p.dp_shard, " x cp ", p.cp, " x tp ", p.tp, " x pp ", p.pp, " = ", ranks,
             " ranks, but the world has ", world_size);
  const int64_t data_ranks = p.dp_replicate * p.dp_shard * p.cp;
  SPMD_CHECK(data_ranks % p.ep == 0, "parallel: ep ", p.ep, " must divide dp_replicate ",
             p.dp_replicate, " x dp_shard ", p.dp_shard, " x cp ", p.cp, " = ", data_ranks,
             " (expert parallel borrows its ranks from those axes)");
  SPMD_CHECK(p.ep == 1 || (m.n_experts > 0 && m.n_experts % p.ep == 0), "parallel: ep ", p.ep,
             " must divide model.n_experts ", m.n_experts,
             m.n_experts == 0 ? " (a model without experts has nothing to split)" : "");
}

// The batch over the dp ranks and the accumulation chunks; under pp, each
// rank's share over the pipeline's microbatches, the stages over the
// layers, and an untied head.
void check_batch(const TrainConfig& c) {
  const ParallelConfig& p = c.parallel;
  const ModelConfig& m = c.model;
  const int64_t dp = p.dp_replicate * p.dp_shard;
  const int64_t per_rank = dp * c.training.microbatches;
  SPMD_CHECK(c.training.global_batch % per_rank == 0, "parallel: training.global_batch ",
             c.training.global_batch, " is not divisible by dp_replicate ", p.dp_replicate,
             " x dp_shard ", p.dp_shard, " x training.microbatches ", c.training.microbatches,
             " = ", per_rank);
  if (p.pp == 1) return;
  const int64_t batch = c.training.global_batch / per_rank;  // one rank's microbatch
  const int64_t pp_microbatches = p.pp_microbatches == 0 ? p.pp : p.pp_microbatches;
  SPMD_CHECK(batch % pp_microbatches == 0, "parallel: pp_microbatches ", pp_microbatches,
             " must divide each rank's batch of ", batch, " sequences (global_batch ",
             c.training.global_batch, " / (dp ", dp, " x microbatches ", c.training.microbatches,
             "))");
  const int64_t stages = p.pp * p.pp_stages_per_rank;
  SPMD_CHECK(stages <= m.n_layers, "parallel: pp ", p.pp, " x pp_stages_per_rank ",
             p.pp_stages_per_rank, " = ", stages, " stages is more than model.n_layers ",
             m.n_layers, " (every stage needs a layer)");
  SPMD_CHECK(p.pp_schedule != "interleaved" || pp_microbatches % p.pp == 0,
             "parallel: the interleaved schedule needs pp_microbatches a multiple of pp ", p.pp,
             ", got ", pp_microbatches);
  SPMD_CHECK(!m.tie_embeddings, "parallel: pp ", p.pp,
             " with model.tie_embeddings = true: the head would live on the last stage and "
             "its embedding on the first; set model.tie_embeddings = false");
}

// Tensor parallelism splits the dense MLPs; an MoE block stays whole on
// every tp rank, which then must all see its whole sequence.
void check_experts_beside_tp(const ParallelConfig& p, const ModelConfig& m) {
  SPMD_CHECK(m.n_experts == 0 || p.tp == 1 || !p.sequence_parallel, "parallel: tp ", p.tp,
             " with sequence_parallel true and model.n_experts ", m.n_experts,
             ": an MoE block would see each tp rank's share of the sequence and its gradients "
             "would not be summed over tp; set sequence_parallel to false");
  SPMD_CHECK(m.n_experts == 0 || p.tp == 1 || (m.moe_every > 1 && m.n_layers > 1), "parallel: tp ",
             p.tp, " with model.moe_every ", m.moe_every, " of model.n_layers ", m.n_layers,
             ": every block is an MoE, and tensor parallelism splits only the dense "
             "MLPs (set model.moe_every to 2 or more, or tp to 1)");
}

// What tp splits (heads, vocabulary, hidden dim) and the sequence over cp (x tp under sp).
void check_splits(const ParallelConfig& p, const ModelConfig& m) {
  const int64_t kv = m.n_kv_heads == 0 ? m.n_heads : m.n_kv_heads;
  const int64_t hidden = transformer_config(m).hidden_dim();
  SPMD_CHECK(m.n_heads % p.tp == 0 && kv % p.tp == 0, "parallel: tp ", p.tp,
             " must divide model.n_heads ", m.n_heads, " and the kv heads ", kv);
  SPMD_CHECK(m.vocab_size % p.tp == 0, "parallel: tp ", p.tp, " must divide model.vocab_size ",
             m.vocab_size);
  SPMD_CHECK(hidden % p.tp == 0, "parallel: tp ", p.tp, " must divide the MLP's hidden dim ",
             hidden);
  const int64_t seq_split = p.sequence_parallel ? p.cp * p.tp : p.cp;
  SPMD_CHECK(m.seq_len % seq_split == 0, "parallel: model.seq_len ", m.seq_len,
             " is not divisible by cp ", p.cp,
             p.sequence_parallel ? str_cat(" x tp ", p.tp, " (sequence_parallel)") : "");
  // Ring attention balances the causal mask by giving each cp rank two of
  // 2 x cp chunks, one from each end (parallel/context_parallel).
  SPMD_CHECK(p.cp == 1 || m.seq_len % (2 * p.cp) == 0, "parallel: model.seq_len ", m.seq_len,
             " is not divisible by 2 x cp = ", 2 * p.cp,
             " (ring attention's load-balanced chunks, two per cp rank)");
}

}  // namespace

void check_layout(const TrainConfig& c, int world_size) {
  check_ranks(c.parallel, c.model, world_size);
  check_batch(c);
  check_experts_beside_tp(c.parallel, c.model);
  check_splits(c.parallel, c.model);
}

}  // namespace spmd::train
