// The TCP backend's algorithms, run by ranks as threads over real loopback
// connections, checked against values worked out by hand (values.h: the sum
// over p ranks is p(p+1)/2 · (1 + i mod 5), ...). Small chunk sizes force the pipelines
// through many chunks even for small buffers, and sizes that do not divide
// by p give segments of unequal length.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "parallel/comm/tcp/all_to_all.h"
#include "parallel/comm/tcp/barrier.h"
#include "parallel/comm/tcp/chain.h"
#include "parallel/comm/tcp/recursive_doubling.h"
#include "parallel/comm/tcp/ring.h"
#include "parallel/comm/tcp/tree.h"
#include "tensor/half.h"
#include "thread_mesh.h"
#include "values.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::tcp;
using spmd::dist::tcp::testing::run_on_threads;

namespace {

using spmd::dist::testing::input_value;
double contribution(int r, size_t i) { return input_value(ReduceOp::kSum, r, i); }
double expected(ReduceOp op, int p, size_t i) {
  return spmd::dist::testing::reduced_value(op, p, i);
}

enum class AllReduceAlgo { kRing, kDoubling };

template <class T>
void check_all_reduce(int p, size_t count, ReduceOp op, AllReduceAlgo algo, const Tuning& tuning) {
  Header h;
  h.op = OpType::kAllReduce;
  h.count = count;
  run_on_threads(p, tuning, h, [&](Context& ctx) {
    std::vector<T> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = T(input_value(op, ctx.rank(), i));
    Span s{reinterpret_cast<char*>(data.data()), count, dtype_of<T>(), sizeof(T)};
    if (algo == AllReduceAlgo::kRing) {
      Ring::all_reduce(ctx, s, op).run();
    } else {
      RecursiveDoublingAllReduce(ctx, s, op).run();
    }
    for (size_t i = 0; i < count; ++i) {
      if (double(data[i]) != expected(op, p, i)) {
        SPMD_THROW(Error, "rank ", ctx.rank(), " of ", p, ": element ", i, " is ",
                   double(data[i]), ", expected ", expected(op, p, i), " (count ", count, ")");
      }
    }
  });
}

Tuning small_chunks() {
  Tuning t;
  t.chunk_bytes = 1024;  // many chunks even for a few KiB
  t.window = 3;
  return t;
}

}  // namespace

TEST_CASE("ring all_reduce sums to p(p+1)/2 for every world size and awkward size", "[comm][tcp]") {
  for (int p : {2, 3, 4, 5, 8}) {
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(4099)}) {
      INFO("p = " << p << ", count = " << count);
      check_all_reduce<float>(p, count, ReduceOp::kSum, AllReduceAlgo::kRing, small_chunks());
    }
  }
  // A large one with the default chunking (2^20 + 3 elements).
  check_all_reduce<float>(4, (1 << 20) + 3, ReduceOp::kSum, AllReduceAlgo::kRing, Tuning{});
}

TEST_CASE("recursive doubling all_reduce, with the fold for non-powers of two", "[comm][tcp]") {
  for (int p : {2, 3, 4, 5, 6, 7, 8}) {
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000)}) {
      INFO("p = " << p << ", count = " << count);
      check_all_reduce<float>(p, count, ReduceOp::kSum, AllReduceAlgo::kDoubling, Tuning{});
    }
  }
}

TEST_CASE("all_reduce ops and dtypes agree with the hand-worked values", "[comm][tcp]") {
  for (auto algo : {AllReduceAlgo::kRing, AllReduceAlgo::kDoubling}) {
    for (ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProd}) {
      INFO("op = " << reduce_op_name(op) << ", algo = " << int(algo));
      for (int p : {3, 4}) {
        check_all_reduce<float>(p, 1000, op, algo, small_chunks());
        check_all_reduce<double>(p, 1000, op, algo, small_chunks());
        check_all_reduce<BFloat16>(p, 1000, op, algo, small_chunks());
        check_all_reduce<Half>(p, 1000, op, algo, small_chunks());
        if (op != ReduceOp::kAvg) {
          check_all_reduce<int32_t>(p, 1000, op, algo, small_chunks());
          check_all_reduce<int64_t>(p, 1000, op, algo, small_chunks());
        }
      }
    }
  }
}

TEST_CASE("ring reduce_scatter gives rank r the reduction of segment r", "[comm][tcp]") {
  for (int p : {2, 3, 5, 8}) {
    for (size_t m : {size_t(0), size_t(1), size_t(7), size_t(1000)}) {
      Header h;
      h.op = OpType::kReduceScatter;
      h.count = p * m;
      run_on_threads(p, small_chunks(), h, [&](Context& ctx) {
        std::vector<float> in(p * m), out(m, -1.f);
        for (size_t i = 0; i < in.size(); ++i) in[i] = float(contribution(ctx.rank(), i));
        const std::vector<float> original = in;
        Span si{reinterpret_cast<char*>(in.data()), in.size(), DType::kF32, 4};
        Span so{reinterpret_cast<char*>(out.data()), m, DType::kF32, 4};
        Ring::reduce_scatter(ctx, si, so, ReduceOp::kSum).run();
        for (size_t i = 0; i < m; ++i) {
          const size_t global = ctx.rank() * m + i;
          SPMD_CHECK(out[i] == expected(ReduceOp::kSum, p, global), "rank ", ctx.rank(), ": out[",
                     i, "] = ", out[i]);
        }
        SPMD_CHECK(in == original, "reduce_scatter modified its input");
      });
    }
  }
}

TEST_CASE("ring all_gather puts rank r's block at r everywhere", "[comm][tcp]") {
  for (int p : {2, 3, 4, 8}) {
    for (size_t m : {size_t(0), size_t(1), size_t(7), size_t(1000)}) {
      Header h;
      h.op = OpType::kAllGather;
      h.count = p * m;
      run_on_threads(p, small_chunks(), h, [&](Context& ctx) {
        std::vector<int64_t> data(p * m, -1);
        for (size_t i = 0; i < m; ++i) data[ctx.rank() * m + i] = ctx.rank() * 100000 + int64_t(i);
        Ring::all_gather(ctx, Span{reinterpret_cast<char*>(data.data()), p * m, DType::kI64, 8})
            .run();
        for (int r = 0; r < p; ++r) {
          for (size_t i = 0; i < m; ++i) {
            SPMD_CHECK(data[r * m + i] == r * 100000 + int64_t(i), "rank ", ctx.rank(), ": block ",
                       r, " element ", i, " is ", data[r * m + i]);
          }
        }
      });
    }
  }
}

TEST_CASE("tree and chain broadcast deliver the root's data from every root", "[comm][tcp]") {
  for (int p : {2, 3, 5, 8}) {
    for (int root = 0; root < p; root += (p > 3 ? 3 : 1)) {
      for (bool chain : {false, true}) {
        const size_t count = chain ? 5000 : 37;
        Header h;
        h.op = OpType::kBroadcast;
        h.arg = root;
        h.count = count;
        run_on_threads(p, small_chunks(), h, [&](Context& ctx) {
          std::vector<int32_t> data(count, -1);
          if (ctx.rank() == root) {
            for (size_t i = 0; i < count; ++i) data[i] = int32_t(root * 1000 + i);
          }
          Span s{reinterpret_cast<char*>(data.data()), count, DType::kI32, 4};
          chain ? ChainBroadcast(ctx, s, root).run() : TreeBroadcast(ctx, s, root).run();
          for (size_t i = 0; i < count; ++i) {
            SPMD_CHECK(data[i] == int32_t(root * 1000 + i), "rank ", ctx.rank(), " root ", root,
                       ": element ", i, " is ", data[i]);
          }
        });
      }
    }
  }
}

TEST_CASE("tree and chain reduce leave the sum at the root and the others untouched",
          "[comm][tcp]") {
  for (int p : {2, 3, 5, 8}) {
    for (int root : {0, p - 1}) {
      for (bool chain : {false, true}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
          const size_t count = chain ? 3001 : 7;
          Header h;
          h.op = OpType::kReduce;
          h.arg = root;
          h.count = count;
          run_on_threads(p, small_chunks(), h, [&](Context& ctx) {
            std::vector<double> data(count);
            for (size_t i = 0; i < count; ++i) data[i] = contribution(ctx.rank(), i);
            const std::vector<double> original = data;
            Span s{reinterpret_cast<char*>(data.data()), count, DType::kF64, 8};
            chain ? ChainReduce(ctx, s, root, op).run() : TreeReduce(ctx, s, root, op).run();
            for (size_t i = 0; i < count; ++i) {
              const double want = ctx.rank() == root ? expected(op, p, i) : original[i];
              SPMD_CHECK(data[i] == want, "rank ", ctx.rank(), " root ", root, " chain ", chain,
                         ": element ", i, " is ", data[i], ", expected ", want);
            }
          });
        }
      }
    }
  }
}

TEST_CASE("all_to_all with uneven splits: rank r receives block r of every rank", "[comm][tcp]") {
  for (int p : {2, 3, 4, 8}) {
    Header h;
    h.op = OpType::kAllToAll;
    run_on_threads(p, Tuning{}, h, [&](Context& ctx) {
      const int r = ctx.rank();
      // Rank s sends (s + d) % 3 elements to rank d, each value s*1000 + d*10 + k.
      auto n = [](int s, int d) { return size_t((s + d) % 3); };
      std::vector<size_t> send_counts(p), recv_counts(p);
      std::vector<int64_t> in, out;
      for (int d = 0; d < p; ++d) {
        send_counts[d] = n(r, d);
        recv_counts[d] = n(d, r);
        for (size_t k = 0; k < n(r, d); ++k) in.push_back(r * 1000 + d * 10 + int64_t(k));
      }
      size_t total_in = 0;
      for (int s = 0; s < p; ++s) total_in += n(s, r);
      out.assign(total_in, -1);
      AllToAll(ctx, Span{reinterpret_cast<char*>(in.data()), in.size(), DType::kI64, 8},
               Span{reinterpret_cast<char*>(out.data()), out.size(), DType::kI64, 8}, send_counts,
               recv_counts)
          .run();
      size_t at = 0;
      for (int s = 0; s < p; ++s) {
        for (size_t k = 0; k < n(s, r); ++k, ++at) {
          SPMD_CHECK(out[at] == s * 1000 + r * 10 + int64_t(k), "rank ", r, ": from ", s, " got ",
                     out[at]);
        }
      }
    });
  }
}

TEST_CASE("dissemination barrier completes for every world size", "[comm][tcp]") {
  for (int p : {2, 3, 5, 8}) {
    Header h;
    h.op = OpType::kBarrier;
    run_on_threads(p, Tuning{}, h, [&](Context& ctx) { DisseminationBarrier(ctx).run(); });
  }
}

TEST_CASE("a header mismatch is reported, naming both sides", "[comm][tcp]") {
  // Rank 1 believes the buffer has 999 elements: both sides must say so.
  Header h;
  h.op = OpType::kAllReduce;
  h.count = 1000;
  try {
    run_on_threads(2, Tuning{}, h, [&](Context& ctx) {
      const size_t count = ctx.rank() == 1 ? 999 : 1000;
      Header mine = h;
      mine.count = count;
      ctx.mesh.begin(mine, Mesh::Clock::now() + std::chrono::seconds(5));
      std::vector<float> data(count, 1.f);
      RecursiveDoublingAllReduce(
          ctx, Span{reinterpret_cast<char*>(data.data()), count, DType::kF32, 4}, ReduceOp::kSum)
          .run();
    });
    FAIL("the mismatch went unnoticed");
  } catch (const LinkError& e) {
    CHECK(e.is_mismatch());
    CHECK_THAT(e.what(), Catch::Contains("999") && Catch::Contains("1000") &&
                             Catch::Contains("different sizes"));
  }
}
