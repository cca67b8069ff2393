// spmd-bench's arithmetic, checked against nccl-tests' conventions worked out
// by hand, and its checker, shown to catch a wrong value (a group of one rank
// runs each op for real; one element is then corrupted on purpose).
#include <catch2/catch.hpp>

#include "bench/collectives/cases.h"
#include "bench/collectives/options.h"
#include "bench/collectives/values.h"
#include "parallel/comm/init.h"
#include "runtime/hash_store.h"

using namespace spmd;
using namespace spmd::bench;

TEST_CASE("sizes and counts follow nccl-tests", "[bench]") {
  // 1 MiB of f32 on 4 ranks: 262144 elements in all.
  const CaseShape ar = case_shape(OpKind::kAllReduce, 1 << 20, DType::kF32, 4);
  CHECK(ar.size_bytes == (1u << 20));
  CHECK(ar.count == 262144);
  CHECK(ar.out_count == 0);  // in place
  const CaseShape ag = case_shape(OpKind::kAllGather, 1 << 20, DType::kF32, 4);
  CHECK(ag.count == 65536);  // each rank's input
  CHECK(ag.in_count == 65536);
  CHECK(ag.out_count == 262144);
  const CaseShape rs = case_shape(OpKind::kReduceScatter, 1 << 20, DType::kF32, 4);
  CHECK(rs.in_count == 262144);
  CHECK(rs.out_count == 65536);
  // 100 bytes of f64 on 3 ranks: 12 elements, 4 per rank, 96 bytes.
  const CaseShape a2a = case_shape(OpKind::kAllToAll, 100, DType::kF64, 3);
  CHECK(a2a.count == 4);
  CHECK(a2a.size_bytes == 96);
}

TEST_CASE("bus bandwidth factors are nccl-tests'", "[bench]") {
  CHECK(bus_factor(OpKind::kAllReduce, 4) == Approx(1.5));  // 2(n-1)/n
  CHECK(bus_factor(OpKind::kAllGather, 4) == Approx(0.75));
  CHECK(bus_factor(OpKind::kReduceScatter, 2) == Approx(0.5));
  CHECK(bus_factor(OpKind::kAllToAll, 8) == Approx(0.875));
  CHECK(bus_factor(OpKind::kBroadcast, 8) == 1);
  CHECK(bus_factor(OpKind::kSendRecv, 3) == 1);
}

TEST_CASE("sizes parse with suffixes and sweep by factor or step", "[bench]") {
  CHECK(parse_bytes("8", "-b") == 8);
  CHECK(parse_bytes("4K", "-b") == 4096);
  CHECK(parse_bytes("256M", "-e") == (size_t(256) << 20));
  CHECK_THROWS_AS(parse_bytes("12Q", "-b"), InvalidArgument);
  BenchOptions o;
  o.min_bytes = 8;
  o.max_bytes = 64;
  o.step_factor = 2;
  CHECK(sweep_sizes(o) == std::vector<size_t>{8, 16, 32, 64});
  o.step_factor = 1;
  o.step_bytes = 20;
  CHECK(sweep_sizes(o) == std::vector<size_t>{8, 28, 48});
}

TEST_CASE("reduced values are exact sums, products, minima and maxima", "[bench]") {
  for (size_t i = 0; i < 50; ++i) {
    double sum = 0, prod = 1;
    for (int r = 0; r < 3; ++r) {
      sum += input_value(dist::ReduceOp::kSum, r, i);
      prod *= input_value(dist::ReduceOp::kProd, r, i);
    }
    CHECK(reduced_value(dist::ReduceOp::kSum, 3, i) == sum);
    CHECK(reduced_value(dist::ReduceOp::kAvg, 3, i) == sum / 3);
    CHECK(reduced_value(dist::ReduceOp::kProd, 3, i) == prod);
    CHECK(input_value(dist::ReduceOp::kSum, 0, i) >= -8);
    CHECK(input_value(dist::ReduceOp::kSum, 0, i) <= 7);
  }
  // bf16 keeps 8 significant bits: 129 is not representable, 1 ulp of avg is allowed.
  CHECK(matches(BFloat16(128.0f), 128, false));
  CHECK_FALSE(matches(BFloat16(126.0f), 128, false));
  CHECK(matches(1.0f + 1.0f / (1 << 23), 1.0, true));
}

TEST_CASE("the checker passes real results and counts a corrupted one", "[bench]") {
  dist::InitOptions init;
  init.store = std::make_shared<HashStore>();
  init.rank = 0;
  init.world_size = 1;
  auto group = dist::init_process_group(init);
  for (OpKind op : all_op_kinds()) {
    if (op == OpKind::kSendRecv) continue;  // needs two ranks
    for (DType dt : {DType::kF32, DType::kBF16, DType::kI64}) {
      Case c(op, dt, dist::ReduceOp::kMax, 0, 4096, *group, Device::cpu());
      c.fill();
      c.launch().wait();
      INFO(op_kind_name(op) << " " << dtype_name(dt));
      CHECK(c.count_wrong() == 0);
    }
  }
  Case c(OpKind::kAllReduce, DType::kF32, dist::ReduceOp::kSum, 0, 64, *group, Device::cpu());
  c.fill();
  c.launch().wait();
  c.input().data<float>()[5] += 1;  // all_reduce is in place: the result lives here
  CHECK(c.count_wrong() == 1);
  dist::destroy_process_group(group);
}
