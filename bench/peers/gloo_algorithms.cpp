// The Gloo peer's algorithms and cases (see the header).
#include "bench/peers/gloo_algorithms.h"

#include <algorithm>
#include <cstdint>

#include "gloo/allgather.h"
#include "gloo/allgather_ring.h"
#include "gloo/allreduce.h"
#include "gloo/allreduce_bcube.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/alltoall.h"
#include "gloo/broadcast.h"
#include "gloo/broadcast_one_to_all.h"
#include "gloo/math.h"
#include "gloo/reduce.h"
#include "gloo/reduce_scatter.h"

namespace gloo_peer {
namespace {

// --- Values (spmd-bench's, bench/collectives/values.h) -------------------------------

uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
float input_value(int r, size_t i) { return float(int(mix(mix(i) ^ uint64_t(r + 1)) & 15) - 8); }
float reduced_value(int p, size_t i) {
  float acc = 0;
  for (int r = 0; r < p; ++r) acc += input_value(r, i);
  return acc;
}

// --- The algorithms ----------------------------------------------------------------

void sum_f32(void* c, const void* a, const void* b, size_t n) { gloo::sum<float>(c, a, b, n); }

// Each maker builds one algorithm for the case's buffers and returns one call.
Call allreduce_new(const Ctx& ctx, Case& c, gloo::AllreduceOptions::Algorithm algorithm) {
  auto opts = std::make_shared<gloo::AllreduceOptions>(ctx);
  opts->setOutput(c.in.data(), c.count);
  opts->setAlgorithm(algorithm);
  opts->setReduceFunction(&sum_f32);
  return [opts] { gloo::allreduce(*opts); };
}

template <class Algorithm, class... Args>
Call classic(const Ctx& ctx, Args&&... args) {
  auto algorithm = std::make_shared<Algorithm>(ctx, std::forward<Args>(args)...);
  return [algorithm] { algorithm->run(); };
}

Call broadcast_new(const Ctx& ctx, Case& c) {
  auto opts = std::make_shared<gloo::BroadcastOptions>(ctx);
  opts->setOutput(c.in.data(), c.count);
  opts->setRoot(c.root);
  return [opts] { gloo::broadcast(*opts); };
}

Call reduce_new(const Ctx& ctx, Case& c) {
  auto opts = std::make_shared<gloo::ReduceOptions>(ctx);
  opts->setOutput(c.in.data(), c.count);
  opts->setRoot(c.root);
  opts->setReduceFunction(&sum_f32);
  return [opts] { gloo::reduce(*opts); };
}

Call allgather_new(const Ctx& ctx, Case& c) {
  auto opts = std::make_shared<gloo::AllgatherOptions>(ctx);
  opts->setInput(c.in.data(), c.count);
  opts->setOutput(c.out.data(), c.count * size_t(c.size));
  return [opts] { gloo::allgather(*opts); };
}

Call alltoall_new(const Ctx& ctx, Case& c) {
  auto opts = std::make_shared<gloo::AlltoallOptions>(ctx);
  opts->setInput(c.in.data(), c.in.size());
  opts->setOutput(c.out.data(), c.out.size());
  return [opts] { gloo::alltoall(*opts); };
}

// A ring exchange: send the input right, receive the left neighbour's.
Call sendrecv_unbound(const Ctx& ctx, Case& c) {
  std::shared_ptr<gloo::transport::UnboundBuffer> in =
      ctx->createUnboundBuffer(c.in.data(), c.count * sizeof(float));
  std::shared_ptr<gloo::transport::UnboundBuffer> out =
      ctx->createUnboundBuffer(c.out.data(), c.count * sizeof(float));
  const int right = (c.rank + 1) % c.size, left = (c.rank + c.size - 1) % c.size;
  const uint64_t slot = uint64_t(ctx->nextSlot());
  return [in, out, right, left, slot] {
    out->recv(left, slot);
    in->send(right, slot);
    in->waitSend();
    out->waitRecv();
  };
}

}  // namespace

std::vector<Algo> algorithms() {
  using A = gloo::AllreduceOptions::Algorithm;
  auto ptrs = [](Case& c) { return std::vector<float*>{c.in.data()}; };
  return {
      {"all_reduce", "allreduce(RING)",
       [](auto& x, Case& c) { return allreduce_new(x, c, A::RING); }},
      {"all_reduce", "allreduce(BCUBE)",
       [](auto& x, Case& c) { return allreduce_new(x, c, A::BCUBE); }},
      {"all_reduce", "AllreduceRing",
       [=](auto& x, Case& c) {
         return classic<gloo::AllreduceRing<float>>(x, ptrs(c), int(c.count));
       }},
      {"all_reduce", "AllreduceRingChunked",
       [=](auto& x, Case& c) {
         return classic<gloo::AllreduceRingChunked<float>>(x, ptrs(c), int(c.count));
       }},
      {"all_reduce", "AllreduceHalvingDoubling",
       [=](auto& x, Case& c) {
         return classic<gloo::AllreduceHalvingDoubling<float>>(x, ptrs(c), int(c.count));
       }},
      {"all_reduce", "AllreduceBcube",
       [=](auto& x, Case& c) {
         return classic<gloo::AllreduceBcube<float>>(x, ptrs(c), int(c.count));
       },
       true},
      {"broadcast", "broadcast", broadcast_new},
      {"broadcast", "BroadcastOneToAll",
       [=](auto& x, Case& c) {
         return classic<gloo::BroadcastOneToAll<float>>(x, ptrs(c), c.count, c.root);
       }},
      {"reduce", "reduce", reduce_new},
      {"all_gather", "allgather", allgather_new},
      {"all_gather", "AllgatherRing",
       [](auto& x, Case& c) {
         return classic<gloo::AllgatherRing<float>>(x, std::vector<const float*>{c.in.data()},
                                                    c.out.data(), int(c.count));
       }},
      {"reduce_scatter", "ReduceScatterHalvingDoubling",
       [=](auto& x, Case& c) {
         return classic<gloo::ReduceScatterHalvingDoubling<float>>(
             x, ptrs(c), int(c.in.size()), std::vector<int>(size_t(c.size), int(c.count)));
       }},
      {"all_to_all", "alltoall", alltoall_new},
      {"sendrecv", "unbound send/recv", sendrecv_unbound},
  };
}

// --- Shapes and checks -------------------------------------------------------------

// spmd-bench's shape: size is the larger buffer; count is each rank's part
// for all_gather, reduce_scatter and all_to_all.
Case make_case(const std::string& op, size_t bytes, int rank, int size, int root) {
  Case c;
  c.op = op;
  c.rank = rank;
  c.size = size;
  c.root = root;
  const size_t total = bytes / sizeof(float), p = size_t(size);
  const bool parted = op == "all_gather" || op == "reduce_scatter" || op == "all_to_all";
  c.count = parted ? total / p : total;
  size_t ins = c.count, outs = 0;
  if (op == "all_gather") outs = c.count * p;
  if (op == "reduce_scatter") ins = c.count * p;
  if (op == "all_to_all") ins = outs = c.count * p;
  if (op == "sendrecv") outs = c.count;
  c.in.assign(ins, 0.f);
  c.out.assign(outs, 0.f);
  c.size_bytes = std::max(ins, outs) * sizeof(float);
  return c;
}

void fill(Case& c) {
  for (size_t i = 0; i < c.in.size(); ++i) {
    const bool holds = c.op != "broadcast" || c.rank == c.root;
    c.in[i] = holds ? input_value(c.rank, i) : 1000.f;
  }
  std::fill(c.out.begin(), c.out.end(), 1000.f);
}

// The expected value of each output element; in place ops are checked in `in`.
long long count_wrong(const Case& c) {
  const size_t m = c.count, p = size_t(c.size);
  long long wrong = 0;
  auto expect = [&](float got, float want) { wrong += got != want; };
  if (c.op == "all_reduce" || (c.op == "reduce" && c.rank == c.root))
    for (size_t i = 0; i < m; ++i) expect(c.in[i], reduced_value(c.size, i));
  if (c.op == "broadcast")
    for (size_t i = 0; i < m; ++i) expect(c.in[i], input_value(c.root, i));
  if (c.op == "reduce_scatter")
    for (size_t i = 0; i < m; ++i) expect(c.in[i], reduced_value(c.size, size_t(c.rank) * m + i));
  if (c.op == "all_gather")
    for (size_t i = 0; i < m * p; ++i) expect(c.out[i], input_value(int(i / m), i % m));
  if (c.op == "all_to_all")
    for (size_t i = 0; i < m * p; ++i)
      expect(c.out[i], input_value(int(i / m), size_t(c.rank) * m + i % m));
  if (c.op == "sendrecv")
    for (size_t i = 0; i < m; ++i) expect(c.out[i], input_value((c.rank + c.size - 1) % c.size, i));
  return wrong;
}

}  // namespace gloo_peer
