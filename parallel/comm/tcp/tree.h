// Binomial trees: the latency-optimal broadcast and reduce for small messages.
//
// Number the ranks relative to the root, v = (rank - root) mod p. Rank v's
// parent is v with its lowest set bit cleared; its children are v + 2^i for
// every 2^i below that bit (and below p). For p = 8:
//
//   0 ─┬─ 1            broadcast: each rank receives from its parent, then
//      ├─ 2 ── 3       sends to its children, largest subtree first.
//      └─ 4 ─┬─ 5      reduce: the same tree upside down; each rank combines
//            └─ 6 ── 7 its children's results with its own, then sends up.
//
// Cost: ⌈log2 p⌉ · (α + nβ) for broadcast, ⌈log2 p⌉ · (α + nβ + nγ) for
// reduce. Every level moves the whole message, so large ones use the
// pipelined chains of chain.h instead.
#pragma once

#include "parallel/comm/tcp/algorithm.h"

namespace spmd::dist::tcp {

class TreeBroadcast {
 public:
  TreeBroadcast(const Context& ctx, Span data, int root);
  void run();

 private:
  Context ctx_;
  Span data_;
  int root_;
};

// Reduces every rank's `data` into the root's `data`; the other ranks'
// tensors are left as they were (partial results go to scratch).
class TreeReduce {
 public:
  TreeReduce(const Context& ctx, Span data, int root, ReduceOp op);
  void run();

 private:
  Context ctx_;
  Span data_;
  int root_;
  ReduceOp op_;
};

}  // namespace spmd::dist::tcp
