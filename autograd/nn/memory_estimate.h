// A lower bound on the memory one training step of a Transformer takes, to
// refuse up front a batch that cannot fit (runtime/resource_limits.h) rather
// than be killed by the kernel halfway through the first forward.
//
// Counted, in f32, for each of the B x T tokens: per block the tensors the
// backward keeps (the block's input, two norms, q k v, the attention output
// and its projection, the MLP's hidden pair, the residuals: about 8 C + 2 F)
// and the attention probabilities (H x T per token); at the head the logits
// and their softmax (2 V). Per parameter: its value, gradient and AdamW's two
// moments. Not counted: temporaries that live within one op, the allocator's
// slack, the dataset. The true peak is higher, never lower.
#pragma once

#include <cstdint>

#include "autograd/nn/transformer.h"

namespace spmd::nn {

inline uint64_t training_step_bytes_lower_bound(const TransformerConfig& c, int64_t num_parameters,
                                                int64_t B) {
  const double T = double(c.max_seq_len), C = double(c.d_model), F = double(c.hidden_dim());
  const double per_token =
      double(c.n_layers) * (8 * C + 2 * F + double(c.n_heads) * T) + 2 * double(c.vocab_size);
  const double floats = double(B) * T * per_token + 4 * double(num_parameters);
  return uint64_t(floats * 4);
}

}  // namespace spmd::nn
