// Dissemination barrier: no rank leaves before every rank has arrived.
//
// In round i (i = 0, 1, ... while 2^i < p) rank r sends an empty message to
// r + 2^i and waits for one from r - 2^i. After round i, a rank has heard,
// directly or through the ranks it heard from, from the 2^(i+1) - 1 ranks
// before it; after ⌈log2 p⌉ rounds, from all of them. The messages are bare
// headers, which also check that every rank is at the same barrier.
//
// Cost: ⌈log2 p⌉ · α, for any p (no power-of-two fold needed).
#pragma once

#include "parallel/comm/tcp/algorithm.h"

namespace spmd::dist::tcp {

class DisseminationBarrier {
 public:
  explicit DisseminationBarrier(const Context& ctx) : ctx_(ctx) {}
  void run();

 private:
  Context ctx_;
};

}  // namespace spmd::dist::tcp
