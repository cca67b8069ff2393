// Pipelined chains: the bandwidth-optimal broadcast and reduce for large
// messages.
//
// The ranks form a line starting at the root, v = (rank - root) mod p:
//   0 → 1 → 2 → ... → p-1     (broadcast flows down it, reduce flows up it)
// and the message is cut into K chunks. In broadcast each rank receives
// chunk k from v-1 and forwards it to v+1 at once, while chunk k+1 is already
// arriving; in reduce each rank receives chunk k from v+1, combines it with
// its own chunk k and sends the partial result on to v-1.
//
// Cost: (p - 2 + K) · (α + nβ/K) (+ nγ for reduce), which tends to nβ as K
// grows: after the pipeline fills, every link moves the message once, at
// full speed, so the time hardly depends on p. Small messages, where the
// p-2 extra latencies dominate, use the binomial trees of tree.h.
#pragma once

#include "parallel/comm/tcp/algorithm.h"

namespace spmd::dist::tcp {

class ChainBroadcast {
 public:
  ChainBroadcast(const Context& ctx, Span data, int root);
  void run();

 private:
  Context ctx_;
  Span data_;
  int root_;
};

// Reduces into the root's `data`; the other ranks' tensors are left as they
// were (partial results go to scratch).
class ChainReduce {
 public:
  ChainReduce(const Context& ctx, Span data, int root, ReduceOp op);
  void run();

 private:
  Context ctx_;
  Span data_;
  int root_;
  ReduceOp op_;
};

}  // namespace spmd::dist::tcp
