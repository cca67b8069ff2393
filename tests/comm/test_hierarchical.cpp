// The hierarchical collectives (parallel/comm/tcp/hierarchical.h), run by
// ranks as threads over loopback links, for several arrangements of ranks
// on "hosts" (the algorithm sees only which rank is on which host: here
// every link is TCP), checked against values worked out by hand (values.h).
// Small chunks and pieces force many ticks of the pipeline on a few KiB, and
// odd sizes give pieces, slices and blocks of unequal length. The choice of
// algorithm (host/algorithm_choice.h) is checked without communication.
#include <catch2/catch.hpp>
#include <vector>

#include "parallel/comm/host/algorithm_choice.h"
#include "parallel/comm/tcp/hierarchical.h"
#include "tensor/half.h"
#include "thread_mesh.h"
#include "values.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::tcp;
using spmd::dist::tcp::testing::run_on_threads;
using spmd::dist::testing::input_value;
using spmd::dist::testing::reduced_value;

namespace {

// [rank]: its host. Contiguous, interleaved, and more hosts or ranks per host.
const std::vector<std::vector<int>> kLayouts = {
    {0, 0, 1, 1}, {0, 1, 0, 1}, {0, 0, 0, 1, 1, 1}, {0, 0, 1, 1, 2, 2}, {1, 0, 0, 1}};

Tuning small_pieces() {
  Tuning t;
  t.chunk_bytes = 1024;
  t.window = 3;
  t.hierarchical_piece_bytes = 4096;  // a few KiB already runs several ticks
  return t;
}

std::string where(const std::vector<int>& hosts, size_t count) {
  std::string s = "hosts [";
  for (int h : hosts) s += std::to_string(h) + " ";
  return s + "], count " + std::to_string(count);
}

template <class T>
void check_all_reduce(const std::vector<int>& hosts, size_t count, ReduceOp op) {
  const int p = int(hosts.size());
  Header h;
  h.op = OpType::kAllReduce;
  h.count = count;
  run_on_threads(p, small_pieces(), h, [&](Context& ctx) {
    const std::optional<Hierarchy> hierarchy = Hierarchy::of_hosts(hosts, ctx.rank());
    SPMD_CHECK(hierarchy.has_value(), "no hierarchy for ", where(hosts, count));
    std::vector<T> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = T(input_value(op, ctx.rank(), i));
    Workspace rail;
    HierarchicalAllReduce(
        ctx, rail, *hierarchy,
        Span{reinterpret_cast<char*>(data.data()), count, dtype_of<T>(), sizeof(T)}, op)
        .run();
    for (size_t i = 0; i < count; ++i) {
      SPMD_CHECK(double(data[i]) == reduced_value(op, p, i), "rank ", ctx.rank(), ", ",
                 where(hosts, count), ", ", reduce_op_name(op), ": element ", i, " is ",
                 double(data[i]), ", expected ", reduced_value(op, p, i));
    }
  });
}

}  // namespace

TEST_CASE("hosts: equal counts of two or more on two or more hosts, numbered by first rank",
          "[comm][tcp]") {
  const auto h = Hierarchy::of_hosts({5, 5, 2, 2}, 2);
  REQUIRE(h.has_value());
  CHECK(h->hosts == std::vector<std::vector<int>>{{0, 1}, {2, 3}});
  CHECK(h->host == 1);
  CHECK(h->local == 0);
  CHECK(h->rail() == std::vector<int>{0, 2});
  CHECK(h->describe() == "2 hosts x 2 ranks");
  const auto interleaved = Hierarchy::of_hosts({0, 1, 0, 1, 0, 1}, 3);
  REQUIRE(interleaved.has_value());
  CHECK(interleaved->hosts == std::vector<std::vector<int>>{{0, 2, 4}, {1, 3, 5}});
  CHECK(interleaved->local == 1);
  CHECK(interleaved->rail() == std::vector<int>{2, 3});
  CHECK_FALSE(Hierarchy::of_hosts({0, 0, 0, 0}, 0));     // one host
  CHECK_FALSE(Hierarchy::of_hosts({0, 1, 2, 3}, 0));     // one rank per host
  CHECK_FALSE(Hierarchy::of_hosts({0, 0, 0, 1, 1}, 0));  // unequal counts
}

TEST_CASE("the choice: hierarchical where the hosts allow it and SPMD_HIERARCHICAL says so",
          "[comm][tcp]") {
  using host::Algorithm;
  using host::choose_algorithm;
  using host::HierarchyMode;
  const Tuning t;  // small all_reduce up to 64 KiB
  const size_t small = 1024, large = 16 << 20;
  CHECK(choose_algorithm(OpType::kAllReduce, large, t, true, HierarchyMode::kAuto) ==
        Algorithm::kHierarchical);
  CHECK(choose_algorithm(OpType::kAllReduce, small, t, true, HierarchyMode::kAuto) ==
        Algorithm::kRecursiveDoubling);
  CHECK(choose_algorithm(OpType::kAllReduce, small, t, true, HierarchyMode::kAlways) ==
        Algorithm::kHierarchical);
  CHECK(choose_algorithm(OpType::kAllReduce, large, t, true, HierarchyMode::kNever) ==
        Algorithm::kRing);
  CHECK(choose_algorithm(OpType::kAllReduce, large, t, false, HierarchyMode::kAlways) ==
        Algorithm::kRing);
  for (OpType op : {OpType::kAllGather, OpType::kReduceScatter}) {
    CHECK(choose_algorithm(op, small, t, true, HierarchyMode::kAuto) == Algorithm::kHierarchical);
    CHECK(choose_algorithm(op, large, t, true, HierarchyMode::kNever) == Algorithm::kRing);
    CHECK(choose_algorithm(op, large, t, false, HierarchyMode::kAuto) == Algorithm::kRing);
  }
  CHECK(choose_algorithm(OpType::kBroadcast, large, t, true, HierarchyMode::kAlways) ==
        Algorithm::kChain);
  CHECK(std::string(host::algorithm_name(Algorithm::kHierarchical)) == "hierarchical");
}

TEST_CASE("hierarchical all_reduce sums to p(p+1)/2 on every arrangement of hosts", "[comm][tcp]") {
  for (const auto& hosts : kLayouts) {
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(4099)}) {
      INFO(where(hosts, count));
      check_all_reduce<float>(hosts, count, ReduceOp::kSum);
    }
  }
  check_all_reduce<float>({0, 0, 1, 1}, (1 << 20) + 3, ReduceOp::kSum);  // 1024 ticks
}

TEST_CASE("hierarchical all_reduce: every op and dtype", "[comm][tcp]") {
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProd}) {
    for (const auto& hosts : {kLayouts[0], kLayouts[3]}) {
      check_all_reduce<float>(hosts, 1001, op);
      check_all_reduce<double>(hosts, 1001, op);
      check_all_reduce<BFloat16>(hosts, 1001, op);
      check_all_reduce<Half>(hosts, 1001, op);
      if (op != ReduceOp::kAvg) {
        check_all_reduce<int32_t>(hosts, 1001, op);
        check_all_reduce<int64_t>(hosts, 1001, op);
      }
    }
  }
}

TEST_CASE("hierarchical all_gather puts rank r's block at r everywhere", "[comm][tcp]") {
  for (const auto& hosts : kLayouts) {
    const int p = int(hosts.size());
    for (size_t m : {size_t(0), size_t(1), size_t(7), size_t(1000)}) {
      INFO(where(hosts, m));
      Header h;
      h.op = OpType::kAllGather;
      h.count = p * m;
      run_on_threads(p, small_pieces(), h, [&](Context& ctx) {
        const auto hierarchy = Hierarchy::of_hosts(hosts, ctx.rank());
        std::vector<int64_t> data(p * m, -1);
        for (size_t i = 0; i < m; ++i) data[ctx.rank() * m + i] = ctx.rank() * 100000 + int64_t(i);
        Workspace rail;
        HierarchicalAllGather(ctx, rail, *hierarchy,
                              Span{reinterpret_cast<char*>(data.data()), p * m, DType::kI64, 8})
            .run();
        for (int r = 0; r < p; ++r) {
          for (size_t i = 0; i < m; ++i) {
            SPMD_CHECK(data[r * m + i] == r * 100000 + int64_t(i), "rank ", ctx.rank(), ", ",
                       where(hosts, m), ": block ", r, " element ", i, " is ", data[r * m + i]);
          }
        }
      });
    }
  }
}

TEST_CASE("hierarchical reduce_scatter gives rank r block r of the sum, and the average",
          "[comm][tcp]") {
  for (const auto& hosts : kLayouts) {
    const int p = int(hosts.size());
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      for (size_t m : {size_t(0), size_t(1), size_t(7), size_t(1000)}) {
        INFO(where(hosts, m) << " " << reduce_op_name(op));
        Header h;
        h.op = OpType::kReduceScatter;
        h.count = p * m;
        run_on_threads(p, small_pieces(), h, [&](Context& ctx) {
          const auto hierarchy = Hierarchy::of_hosts(hosts, ctx.rank());
          std::vector<float> in(p * m), out(m, -1.f);
          for (size_t i = 0; i < in.size(); ++i) in[i] = float(input_value(op, ctx.rank(), i));
          const std::vector<float> original = in;
          Workspace rail;
          HierarchicalReduceScatter(ctx, rail, *hierarchy,
                                    Span{reinterpret_cast<char*>(in.data()), p * m, DType::kF32, 4},
                                    Span{reinterpret_cast<char*>(out.data()), m, DType::kF32, 4},
                                    op)
              .run();
          for (size_t i = 0; i < m; ++i) {
            const double want = reduced_value(op, p, ctx.rank() * m + i);
            SPMD_CHECK(out[i] == want, "rank ", ctx.rank(), ", ", where(hosts, m), ", ",
                       reduce_op_name(op), ": out[", i, "] = ", out[i], ", expected ", want);
          }
          SPMD_CHECK(in == original, "reduce_scatter modified its input");
        });
      }
    }
  }
}
