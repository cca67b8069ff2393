// The Gloo peer's algorithms (bench/peers/gloo_bench.cpp): every algorithm
// Gloo has for each op, each made into one call on a case's buffers, and
// the cases themselves, shaped and checked as spmd-bench shapes and checks
// them (bench/collectives/cases.h, values.h). Floats and sum only.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gloo/context.h"

namespace gloo_peer {

using Ctx = std::shared_ptr<gloo::Context>;
using Call = std::function<void()>;

// One size of one op on this rank: its buffers, as spmd-bench shapes them.
struct Case {
  std::string op;
  int rank = 0, size = 1, root = 0;
  size_t count = 0, size_bytes = 0;
  std::vector<float> in, out;
};

// One Gloo algorithm for one op: make() builds it for a case's buffers (once
// per size, as a Gloo user keeps an algorithm object per buffer) and returns
// the call that runs it.
struct Algo {
  const char* op;
  const char* name;
  std::function<Call(const Ctx&, Case&)> make;
  bool needs_power_of_two = false;  // AllreduceBcube (base 2) is wrong on other sizes
};

// Every algorithm, grouped by op.
std::vector<Algo> algorithms();

// spmd-bench's shape of `op` at `bytes` on this rank; buffers zeroed.
Case make_case(const std::string& op, size_t bytes, int rank, int size, int root);
// Fills the inputs with spmd-bench's values and the outputs with a sentinel.
void fill(Case& c);
// How many result elements differ from the expected values.
long long count_wrong(const Case& c);

}  // namespace gloo_peer
