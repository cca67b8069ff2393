// Context parallelism (16.8.1): a long sequence split across the ranks of
// the mesh's "cp" axis, so each holds the activations of T/cp tokens.
//
// Every rank of a cp group takes the same sequences and keeps its two
// chunks of each (shard_sequence: chunks r and 2cp-1-r of 2cp, for an equal
// share of the causal work); everything but attention is per token and runs
// on the local tokens unchanged. parallelize_context() makes the model's
// attention ring attention over the group (ring_attention.h) and its
// positions, learned or rotary (RoPE), the global positions of the local
// tokens. The loss of a rank is
// the mean over its tokens, and the ranks hold equal counts, so averaging
// the parameters' gradients over the cp group (DDP on the cp axis, or on a
// dp x cp flattened axis together with data parallelism) gives the
// gradient of the whole sequence's mean.
//
// Not here: load balancing of variable-length documents.
#pragma once

#include <memory>

#include "autograd/nn/transformer.h"
#include "parallel/comm/process_group.h"

namespace spmd::dist::cp {

// This rank's chunks of x along `dim` (the sequence): chunks r and 2cp-1-r
// of 2cp equal chunks, side by side. Throws when the length does not divide.
Tensor shard_sequence(const Tensor& x, int dim, const ProcessGroup& group);

// Ring attention in every block over `group`, and global positions: the
// learned position embedding's ids, or the RoPE tables' rows.
void parallelize_context(nn::Transformer& model, std::shared_ptr<ProcessGroup> group);

}  // namespace spmd::dist::cp
