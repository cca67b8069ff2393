// The hierarchical collectives in real processes on one machine: a world of
// 4 whose ranks SPMD_TRANSPORT_HOST_SPLIT=2 puts on two "hosts" (shared
// memory within each, TCP across, as on two machines; the netns test,
// tests/launcher/test_two_hosts.sh, runs them across real namespaces). The
// group says which algorithm ran (ProcessGroup::last_algorithm), for each
// SPMD_HIERARCHICAL, and the values, in place and out of place, match those
// worked out by hand (values.h). A rank that never comes to a hierarchical
// collective is named by the others' timeouts, as with the flat ones.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "harness.h"
#include "survivors.h"
#include "tensor/ops.h"
#include "tensor/views.h"
#include "values.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

// Throws naming the first element of t (f32) that differs from want(i).
void check_floats(const Tensor& t, const std::function<double(size_t)>& want, const char* what) {
  const float* p = static_cast<const float*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    expect(double(p[i]) == want(size_t(i)), what, ": element ", i, " is ", p[i], ", expected ",
           want(size_t(i)));
  }
}

void fill_floats(const Tensor& t, const std::function<double(size_t)>& value) {
  float* p = static_cast<float*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = float(value(size_t(i)));
}

// The three collectives, in place and out of place, checked, and the
// algorithm each ran: `small` for a small all_reduce, `large` for the rest.
void run_three(ProcessGroup& g, const std::string& small, const std::string& large) {
  const int p = g.size(), r = g.rank();
  Tensor t = cpu_tensor(1000, DType::kF32);
  fill_floats(t, [&](size_t i) { return input_value(ReduceOp::kMax, r, i); });
  g.all_reduce(t, ReduceOp::kMax).wait();
  check_floats(
      t, [&](size_t i) { return reduced_value(ReduceOp::kMax, p, i); }, "small max");
  expect(g.last_algorithm(OpType::kAllReduce) == small, "a small all_reduce ran ",
         g.last_algorithm(OpType::kAllReduce), ", not ", small);
  Tensor big = cpu_tensor((1 << 20) + 3, DType::kF32);  // 4 MiB: 64 pieces of 64 KiB
  fill_floats(big, [&](size_t i) { return input_value(ReduceOp::kAvg, r, i); });
  g.all_reduce(big, ReduceOp::kAvg).wait();
  check_floats(
      big, [&](size_t i) { return reduced_value(ReduceOp::kAvg, p, i); }, "large avg");
  expect(g.last_algorithm(OpType::kAllReduce) == large, "a large all_reduce ran ",
         g.last_algorithm(OpType::kAllReduce));
  const int64_t m = 100003;  // odd: pieces and slices of unequal length
  Tensor all = cpu_tensor(p * m, DType::kF32), out = cpu_tensor(m, DType::kF32);
  Tensor mine = ops::narrow(all, 0, r * m, m);  // a view of block r: in place
  for (bool in_place : {false, true}) {
    Tensor block = in_place ? mine : out;
    fill_floats(all, [&](size_t i) { return i / m == size_t(r) ? double(r * 10 + i % 7) : -1.0; });
    if (!in_place) fill_floats(out, [&](size_t i) { return double(r * 10 + (r * m + i) % 7); });
    g.all_gather(all, block).wait();
    check_floats(
        all, [&](size_t i) { return double(i / m * 10 + i % 7); }, "all_gather");
    expect(g.last_algorithm(OpType::kAllGather) == large, "all_gather ran ",
           g.last_algorithm(OpType::kAllGather));
    fill_floats(all, [&](size_t i) { return input_value(ReduceOp::kSum, r, i); });
    g.reduce_scatter(block, all).wait();
    check_floats(
        block, [&](size_t i) { return reduced_value(ReduceOp::kSum, p, r * m + i); },
        "reduce_scatter");
    expect(g.last_algorithm(OpType::kReduceScatter) == large, "reduce_scatter ran ",
           g.last_algorithm(OpType::kReduceScatter));
  }
}

}  // namespace

TEST_CASE("two hosts of two ranks run hierarchical collectives, as SPMD_HIERARCHICAL says",
          "[comm][shm]") {
  ScopedEnv split("SPMD_TRANSPORT_HOST_SPLIT", "2");
  ScopedEnv pieces("SPMD_TCP_HIERARCHICAL_PIECE_BYTES", "65536");
  SECTION("auto: hierarchical, but recursive doubling for a small all_reduce") {
    REQUIRE_NOTHROW(run_world(4, [](ProcessGroup& g) {
      expect(g.algorithm_summary().rfind("hierarchical (2 hosts x 2 ranks) for all_reduce above",
                                         0) == 0,
             "summary: ", g.algorithm_summary());
      run_three(g, "recursive_doubling", "hierarchical");
    }));
  }
  SECTION("1: hierarchical at every size") {
    ScopedEnv mode("SPMD_HIERARCHICAL", "1");
    REQUIRE_NOTHROW(
        run_world(4, [](ProcessGroup& g) { run_three(g, "hierarchical", "hierarchical"); }));
  }
  SECTION("0: the flat ring") {
    ScopedEnv mode("SPMD_HIERARCHICAL", "0");
    REQUIRE_NOTHROW(run_world(4, [](ProcessGroup& g) {
      expect(g.algorithm_summary() == "flat (2 hosts x 2 ranks, SPMD_HIERARCHICAL=0)",
             "summary: ", g.algorithm_summary());
      run_three(g, "recursive_doubling", "ring");
    }));
  }
}

TEST_CASE("hosts of unequal rank counts, and one host, stay flat", "[comm][shm]") {
  ScopedEnv split("SPMD_TRANSPORT_HOST_SPLIT", "2");
  REQUIRE_NOTHROW(run_world(3, [](ProcessGroup& g) {
    expect(g.algorithm_summary() ==
               "flat (2 hosts, not the same number of ranks, two or more, on each)",
           "summary: ", g.algorithm_summary());
    Tensor t = floats(100000, 1.f);
    g.all_gather(cpu_tensor(300000, DType::kF32), t).wait();
    expect(g.last_algorithm(OpType::kAllGather) == "ring", "ran ",
           g.last_algorithm(OpType::kAllGather));
  }));
  ScopedEnv no_split("SPMD_TRANSPORT_HOST_SPLIT", "");
  REQUIRE_NOTHROW(run_world(2, [](ProcessGroup& g) {
    expect(g.algorithm_summary() == "flat (one host)", "summary: ", g.algorithm_summary());
  }));
}

// Rank 3 shares no link with rank 0 in a hierarchical all_reduce (its
// host's peer is rank 2, its rail's rank 1): rank 0 learns it never came
// from the store's arrival records, as a flat ring's far ranks are named.
TEST_CASE("a rank that skips a hierarchical all_reduce is named by every other rank's timeout",
          "[comm][failure]") {
  ScopedEnv split("SPMD_TRANSPORT_HOST_SPLIT", "2");
  ScopedEnv mode("SPMD_HIERARCHICAL", "1");
  check_absent_rank_named(/*world=*/4, /*absent=*/3, /*elements=*/100000);
}
