// 03_collectives: the communication patterns of distributed training
// (chapter 16.2), each shown on small tensors whose results can be checked
// by hand. Every rank calls the same collectives in the same order; a
// collective returns a Work at once and runs on the communicator's thread,
// so a rank may compute while it proceeds and wait() only when it needs the
// result.
//
//   spmdrun --standalone --nproc-per-node 4 03_collectives
//
//   broadcast       root's tensor -> everyone          (initial weights)
//   all_reduce      everyone's sum -> everyone         (gradients: DDP)
//   reduce          everyone's sum -> root
//   all_gather      everyone's piece -> everyone has all pieces (FSDP, TP)
//   reduce_scatter  the sum, cut in pieces, one per rank        (FSDP)
//   all_to_all      rank i's piece j -> rank j's piece i  (expert parallel)
//   send / recv     one rank to one rank                  (pipeline)
//   barrier         nobody passes before everyone arrives
#include <cstdio>
#include <string>
#include <vector>

#include "parallel/comm/init.h"
#include "tensor/ops.h"

using namespace spmd;

namespace {

std::string show(const Tensor& t) {
  std::string s = "[";
  for (double v : ops::to_vector<double>(t))
    s += (s.size() > 1 ? ", " : "") + std::to_string(int(v));
  return s + "]";
}

// Prints one line per rank, in rank order (a barrier between turns).
void say(dist::ProcessGroup& world, const std::string& what, const Tensor& t) {
  for (int r = 0; r < world.size(); ++r) {
    if (r == world.rank()) {
      std::printf("%-15s rank %d: %s\n", what.c_str(), r, show(t).c_str());
      std::fflush(stdout);
    }
    world.barrier().wait();
  }
}

Tensor values(std::vector<float> v) { return ops::from_vector(v, {int64_t(v.size())}); }

void run(dist::ProcessGroup& world) {
  const int rank = world.rank(), n = world.size();
  const auto f = float(rank);

  // broadcast: rank 0's weights overwrite everyone's.
  Tensor w = rank == 0 ? values({7, 8, 9}) : values({0, 0, 0});
  world.broadcast(w, /*root=*/0).wait();
  say(world, "broadcast", w);  // [7, 8, 9] everywhere

  // all_reduce (sum): rank r holds r+1; everyone gets 1 + 2 + ... + n.
  Tensor g = values({f + 1, 10 * (f + 1)});
  dist::Work work = world.all_reduce(g, dist::ReduceOp::kSum);  // returns at once
  Tensor other = ops::mul(values({1, 2}), 3.0);                 // ...compute meanwhile...
  work.wait();                                                  // ...then join it
  say(world, "all_reduce sum", g);                              // [n(n+1)/2, 10 n(n+1)/2]
  (void)other;

  Tensor m = values({f, -f});
  world.all_reduce(m, dist::ReduceOp::kMax).wait();
  say(world, "all_reduce max", m);  // [n-1, 0]

  // reduce: only the root receives the sum; the others keep their input.
  Tensor r = values({f + 1});
  world.reduce(r, /*root=*/0).wait();
  say(world, "reduce to 0", r);

  // all_gather: each contributes [r, r]; everyone gets them all in rank order.
  Tensor gathered = ops::empty({2 * n}, {});
  world.all_gather(gathered, values({f, f})).wait();
  say(world, "all_gather", gathered);

  // reduce_scatter: the sum of everyone's [0, 1, ..., n-1] * (r+1), cut in
  // n pieces; rank i keeps piece i, which is i * n(n+1)/2.
  std::vector<float> row(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) row[size_t(i)] = float(i) * (f + 1);
  Tensor piece = ops::empty({1}, {});
  world.reduce_scatter(piece, values(row)).wait();
  say(world, "reduce_scatter", piece);

  // all_to_all: rank r sends 10 r + j to rank j; rank j receives 10 i + j from each i.
  for (int j = 0; j < n; ++j) row[size_t(j)] = 10 * f + float(j);
  Tensor received = ops::empty({n}, {});
  world.all_to_all(received, values(row)).wait();
  say(world, "all_to_all", received);

  // send / recv around a ring: each rank passes its rank to the right.
  Tensor in = ops::empty({1}, {});
  dist::Work got = world.recv(in, (rank + n - 1) % n);  // post the receive first...
  world.send(values({f}), (rank + 1) % n).wait();       // ...then send: no deadlock
  got.wait();
  say(world, "recv from left", in);

  world.barrier().wait();
  if (rank == 0) std::printf("all collectives done on %d ranks\n", n);
}

}  // namespace

int main() {
  try {
    auto world = dist::init_process_group();  // env://, the TCP backend
    run(*world);
    dist::destroy_process_group(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "03_collectives: %s\n", e.what());
    return 1;
  }
  return 0;
}
