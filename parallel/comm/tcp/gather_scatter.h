// Gather and scatter: the root receives one block from every rank, or sends
// every rank its block, all over its own links at once.
//
//   gather:  rank r sends its block to the root, which posts a receive from
//            every peer straight into that peer's slot of its output and
//            copies its own block into place while the peers' arrive;
//   scatter: the root queues every peer's block on that peer's link and
//            copies its own; each other rank receives its block.
//
// Cost: (p-1) · α + (p-1)/p · nβ at the root (n: the whole gathered or
// scattered buffer) if its links run in parallel; every other rank moves
// only its block. The header on each link carries the block's size and the
// root, so ranks that disagree on either are caught. Not here: binomial
// trees, which take ⌈log2 p⌉ steps instead of p-1 for small messages.
#pragma once

#include "parallel/comm/tcp/algorithm.h"

namespace spmd::dist::tcp {

class FlatGather {
 public:
  // input: this rank's block; output: the root's whole buffer (data null on
  // the other ranks). In place when input is output's block root.
  FlatGather(const Context& ctx, Span input, Span output, int root);
  void run();

 private:
  Context ctx_;
  Span input_, output_;
  int root_;
};

class FlatScatter {
 public:
  // input: the root's whole buffer (data null on the other ranks); output:
  // this rank's block. In place when output is input's block root.
  FlatScatter(const Context& ctx, Span input, Span output, int root);
  void run();

 private:
  Context ctx_;
  Span input_, output_;
  int root_;
};

}  // namespace spmd::dist::tcp
