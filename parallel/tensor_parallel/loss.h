// Vocabulary-parallel cross-entropy: the loss of vocab-sharded logits
// without ever gathering them (Megatron's parallel cross-entropy).
//
// Rank r holds logits (..., V/tp) for the words [r V/tp, (r+1) V/tp). The
// loss of a row is log(sum_v exp(x_v)) - x_target, and both parts reduce
// over ranks: the row's maximum (for a stable exp) by one all_reduce(max) of
// (N) values, then the sums of exp and the target's logit (held by one rank,
// zero elsewhere) by one all_reduce(sum) of (2, N). The gradient,
// softmax - onehot, is local: each rank's slice of it needs only the
// (N) totals. So nothing of size (N, V) exists on any rank, and the loss
// moves 3 N values per row set however large V is.
#pragma once

#include "parallel/comm/process_group.h"
#include "tensor/tensor.h"

namespace spmd::dist::tp {

// The mean over the rows whose target is not ignore_index, as
// spmd::cross_entropy of the gathered logits, identical on every rank of
// `group`; its backward gives each rank the gradient of its own logits.
// logits (..., V/tp) floating, targets (...) integer ids of the whole
// vocabulary. REQUIRES: every rank's logits have the same shape. The
// backward turns its saved softmax into the gradient in place, so a second
// backward through the same graph (retain_graph) throws.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                    ProcessGroup& group, int64_t ignore_index = -100);

}  // namespace spmd::dist::tp
