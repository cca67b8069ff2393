// A tensor-parallel plan: which style each module of a model gets, by name,
// and the plan for spmd's Transformer (GPT-2 and Llama shapes).
//
//   tp::Plan plan = tp::transformer_plan(model->config, mesh.size("tp"), /*sp=*/true);
//   tp::parallelize_module(*model, mesh["tp"], plan);
//   AdamW opt(model->parameters(), ...);   // after: the parameters are now slices
//
// The Transformer plan is Megatron's: in every block the attention is split
// by heads (q, k, v column-parallel, wo row-parallel) and the MLP by hidden
// units (w1, w3 column-parallel, w2 row-parallel): per block one collective
// into and one out of each half, forward and backward. The embedding and the
// head are split along the vocabulary, so the logits stay vocab-sharded for
// vocab_parallel_cross_entropy (loss.h). With sequence parallelism the
// norms, dropouts and residual stream between those regions hold T/tp tokens
// per rank: the all_reduce out of a region becomes a reduce_scatter along T
// and f into one an all_gather along T (the same bytes, 1/tp the activations).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/nn/transformer.h"
#include "parallel/tensor_parallel/style.h"

namespace spmd::dist::tp {

// A pattern names modules by their dotted path; "*" stands for one whole
// component ("layers.*.attn.wqkv"). Entries apply in order, and several may
// match one module (a norm that is both SequenceParallel and prepares its output).
struct PlanEntry {
  std::string pattern;
  std::shared_ptr<ParallelStyle> style;
};
using Plan = std::vector<PlanEntry>;

// Whether a dotted module path matches a pattern.
bool matches(const std::string& pattern, const std::string& path);

// Applies every entry of the plan to the modules of `model` it matches, over
// the 1-D mesh `tp_mesh`. A pattern that matches no module, a module of the
// wrong type, or a size that does not divide throws InvalidArgument naming
// it; nothing here communicates, so every such error comes before any
// collective. REQUIRES: every rank built `model` identically (the same seed);
// optimizers are made afterwards.
void parallelize_module(nn::Module& model, const DeviceMesh& tp_mesh, const Plan& plan);

// The plan for nn::Transformer with `config` over tp ranks. Throws
// InvalidArgument, naming the size, when the heads, the key/value heads, the
// FFN width or the vocabulary does not divide by tp.
Plan transformer_plan(const nn::TransformerConfig& config, int64_t tp, bool sequence_parallel);

// What transformer_plan's collectives carry over the tp group in one
// training step (forward and backward) of a batch of B sequences of T
// tokens, in ProcessGroup::stats()'s payload bytes and calls:
//   without SP, all_reduces of B T C: 1 (the embedding) + 2 per block
//     forward, 2 per block + 1 (into the head) backward;
//   with SP, the same count of all_gathers and of reduce_scatters of B T C
//     (half each: the same bytes), plus one all_reduce per replicated
//     parameter whose gradient is summed (norms, row-parallel biases), and
//     an all_gather of (T, C) for learned positions;
//   both: the loss's all_reduce of B T maxima and of (2, B T) sums.
// Activations in f32 (4 bytes).
struct TpCommVolume {
  CommStats::Count all_reduce, all_gather, reduce_scatter;
  uint64_t total_bytes() const {
    return all_reduce.bytes + all_gather.bytes + reduce_scatter.bytes;
  }
};
TpCommVolume transformer_tp_comm_per_step(const nn::TransformerConfig& config, int64_t B, int64_t T,
                                          bool sequence_parallel);

// Both: transformer_plan, then parallelize_module.
void parallelize_transformer(nn::Transformer& model, const DeviceMesh& tp_mesh,
                             bool sequence_parallel);

}  // namespace spmd::dist::tp
