// Recursive doubling: the latency-optimal all_reduce for small messages.
//
// With p a power of two, in round i (mask = 2^i) each rank exchanges its whole
// buffer with the rank whose number differs in bit i and combines the two.
// After log2 p rounds every rank has combined every other's data:
//
//   round 0: 0<->1  2<->3     round 1: 0<->2  1<->3     (p = 4)
//
// Both partners compute a op b (and b op a, the same for these commutative
// ops), so every rank ends with identical bits.
//
// When p is not a power of two, let q be the largest power of two below it
// and e = p - q. First the ranks 0..2e-1 pair up: each even one sends its
// data to the odd one above it and sits out; the q remaining ranks run the
// rounds; finally each odd rank of a pair hands the result back.
//
// Cost: log2(q) · (α + nβ + nγ), plus 2(α + nβ) + nγ when p is not a power
// of two. Only ⌈log p⌉ latencies instead of the ring's 2(p-1), but every
// round moves the whole buffer, so past a few tens of KiB the ring wins.
#pragma once

#include "parallel/comm/tcp/algorithm.h"

namespace spmd::dist::tcp {

class RecursiveDoublingAllReduce {
 public:
  RecursiveDoublingAllReduce(const Context& ctx, Span data, ReduceOp op);
  void run();

 private:
  // The real rank of a rank among the q that run the rounds.
  int real_rank(int v) const { return v < extra_ ? 2 * v + 1 : v + extra_; }
  void exchange_and_combine(int peer);

  Context ctx_;
  Span data_;
  ReduceOp op_;
  int p_, rank_;
  int q_;      // the largest power of two <= p
  int extra_;  // p - q: ranks folded into a partner
  char* staged_;
};

}  // namespace spmd::dist::tcp
