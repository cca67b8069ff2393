// Context parallelism: the sequence's chunks, and the two places a model
// must know where its tokens sit (attention and positions).
#include "parallel/context_parallel/context_parallel.h"

#include "autograd/nn/checkpoint_wrapper.h"
#include "parallel/context_parallel/ring_attention.h"
#include "tensor/ops.h"

namespace spmd::dist::cp {

Tensor shard_sequence(const Tensor& x, int dim, const ProcessGroup& group) {
  const int64_t n = group.size(), T = x.size(dim);
  SPMD_CHECK(T % (2 * n) == 0, "context parallel: a sequence of ", T,
             " tokens does not divide into 2 x cp = ", 2 * n, " chunks");
  const int64_t c = T / (2 * n);
  const auto [a, b] = chunk_ids(n, group.rank());
  return ops::contiguous(
      ops::cat({ops::narrow(x, dim, a * c, c), ops::narrow(x, dim, b * c, c)}, dim));
}

void parallelize_context(nn::Transformer& model, std::shared_ptr<ProcessGroup> group) {
  for (size_t i = 0; i < model.layers->size(); ++i) {
    nn::Module* m = model.layers->at(i).get();
    if (auto* w = dynamic_cast<nn::CheckpointWrapper*>(m)) m = &w->inner();
    auto* block = dynamic_cast<nn::TransformerBlock*>(m);
    SPMD_CHECK(block != nullptr, "context parallel: layers.", i, " is a ", m->type_name(),
               ", not a TransformerBlock");
    ProcessGroup* g = group.get();
    block->attn->attention_fn = [g, group](const Tensor& q, const Tensor& k, const Tensor& v) {
      return ring_attention(q, k, v, *g);
    };
    // RoPE: the rows of the local chunks' global positions, cut from the
    // table's first T x cp rows as the tokens were cut from the sequence.
    block->attn->rope_rows = [g, group](const Tensor& table, int64_t T) {
      const int64_t global = T * g->size();
      SPMD_CHECK(global <= table.size(0), "context parallel: a sequence of ", global, " tokens (",
                 T, " per rank x cp ", g->size(), ") exceeds the RoPE table's ", table.size(0),
                 " positions (max_seq_len)");
      return shard_sequence(ops::narrow(table, 0, 0, global), 0, *g);
    };
  }
  // Learned positions: the ids arange(T_local) become the global positions
  // of the local chunks.
  if (model.pos_embeddings) {
    model.pos_embeddings->register_forward_pre_hook([group](nn::Module&, Tensor& positions) {
      positions = shard_sequence(
          ops::arange(positions.size(0) * group->size(), {positions.dtype(), positions.device()}),
          0, *group);
    });
  }
}

}  // namespace spmd::dist::cp
