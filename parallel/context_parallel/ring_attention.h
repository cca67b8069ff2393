// Ring attention: causal attention over a sequence split across the ranks
// of a context-parallel group (16.8.1).
//
// The sequence of T tokens is cut into 2 cp chunks of c = T / (2 cp); rank r
// holds chunks r and 2cp-1-r (its queries, keys and values), so that under
// the causal mask every rank has the same work: an early chunk sees little,
// its partner late chunk sees much. The key/value pair then travels around
// the ring, cp steps: at step s rank r holds the chunks of rank (r - s) mod
// cp; the next pair's transfer runs while this pair is computed.
//
//   rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2 (cp = 2):
//
//            keys:  0    1    2    3
//   queries 0      [d]   .    .    .        d: the diagonal block (causal)
//           1       F   [d]   .    .        F: a full block
//           2       F    F   [d]   .        .: above the diagonal, skipped
//           3       F    F    F   [d]       (not computed, not masked)
//
// Each query chunk's partial results against the key chunks it sees are
// merged exactly with the running log-sum-exp:
//   lse = log(e^lse1 + e^lse2),  out = out1 e^(lse1 - lse) + out2 e^(lse2 - lse).
// Every rank computes 2 cp + 1 blocks.
//
// Blocks run on the fused attention kernel (f64 in raw ops, for precision),
// which never holds a block's probabilities. Backward recomputes each
// block's probabilities against the saved global lse, so nothing of size
// T x T is kept: dQ accumulates locally, dK and dV in an accumulator per
// owner that follows its keys and values one step behind (so its transfer
// too runs while the next step computes) and arrives home after cp steps.
//
// Grouped-query attention: keys and values of fewer heads are repeated to
// the query heads before the ring (their gradients summed back after).
#pragma once

#include "parallel/comm/process_group.h"
#include "tensor/tensor.h"

namespace spmd::dist::cp {

// The two chunks of the sequence rank `rank` of `cp` ranks holds: {r, 2cp-1-r}.
std::pair<int64_t, int64_t> chunk_ids(int64_t cp, int64_t rank);

// Causal attention of q (B, H, 2c, D) against k, v (B, Hkv, 2c, D), each
// this rank's two chunks side by side, over the whole sequence the group
// holds. Differentiable (autograd). Collective over `group`; every rank
// calls it with the same shapes. scale < 0: 1/sqrt(D).
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, ProcessGroup& group,
                      double scale = -1);

// Blocks this process has computed in ring_attention's forwards so far (the
// load-balance check: equal on every rank).
int64_t ring_attention_blocks();

// The ring's transfers in this process's ring_attention calls so far, per
// pass: how many, their time in flight (posted to completed) and the time
// the computing thread then waited on them. The share hidden behind compute
// is 1 - wait_us / transfer_us.
struct RingTransfers {
  int64_t transfers = 0, transfer_us = 0, wait_us = 0;
};
struct RingTransferStats {
  RingTransfers forward, backward;
};
RingTransferStats ring_transfers();

}  // namespace spmd::dist::cp
