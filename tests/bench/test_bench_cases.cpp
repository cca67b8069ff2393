// spmd-bench's arithmetic, checked against nccl-tests' conventions worked out
// by hand (sizes, bus factors, number formats, per-iteration statistics,
// all_to_allv's blocks), and its checker, shown to catch a wrong value (a
// group of one rank runs each op in each placement for real; one element is
// then corrupted on purpose).
#include <catch2/catch.hpp>
#include <cmath>
#include <iostream>
#include <sstream>

#include "bench/collectives/cases.h"
#include "bench/collectives/iter_stats.h"
#include "bench/collectives/options.h"
#include "bench/collectives/report.h"
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
  CHECK(ar.out_count == 262144);  // the receive buffer, out of place
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
  // gather: 1 MiB of f32 gathered from 4 ranks, 65536 each; scatter the reverse.
  const CaseShape g = case_shape(OpKind::kGather, 1 << 20, DType::kF32, 4);
  CHECK(g.count == 65536);
  CHECK(g.out_count == 262144);
  const CaseShape sc = case_shape(OpKind::kScatter, 1 << 20, DType::kF32, 4);
  CHECK(sc.in_count == 262144);
  CHECK(sc.out_count == 65536);
}

TEST_CASE("each op offers the placements spmd's API has", "[bench]") {
  CHECK(offers(OpKind::kAllReduce, Placement::kInPlace));
  CHECK(offers(OpKind::kAllReduce, Placement::kOutOfPlace));  // a copy, then the call
  CHECK(offers(OpKind::kBroadcast, Placement::kOutOfPlace));
  CHECK(offers(OpKind::kReduce, Placement::kOutOfPlace));
  CHECK(offers(OpKind::kGather, Placement::kInPlace));
  CHECK(offers(OpKind::kScatter, Placement::kOutOfPlace));
  CHECK_FALSE(offers(OpKind::kAllToAllv, Placement::kInPlace));
  CHECK_FALSE(offers(OpKind::kSendRecv, Placement::kInPlace));
}

TEST_CASE("all_to_allv's blocks: every rank sends and receives n, in uneven pairs", "[bench]") {
  // n = 60 on 3 ranks, in proportion 1 : 2 : 3: parts of 10, 20 and 30.
  CHECK(a2av_count(60, 3, 0, 0) == 10);
  CHECK(a2av_count(60, 3, 0, 1) == 20);
  CHECK(a2av_count(60, 3, 2, 1) == 30);  // (1 - 2) mod 3 = 2
  for (int p : {1, 2, 3, 5}) {
    for (size_t n : {size_t(0), size_t(7), size_t(1000)}) {
      for (int r = 0; r < p; ++r) {
        size_t sent = 0, received = 0;
        for (int j = 0; j < p; ++j)
          sent += a2av_count(n, p, r, j), received += a2av_count(n, p, j, r);
        CHECK(sent == n);
        CHECK(received == n);
      }
    }
  }
  // Rank 1 of 3 receives from ranks 0, 1, 2 blocks of 20, 10, 30 (n = 60),
  // laid out last rank first: rank 2's at 0, rank 1's at 30, rank 0's at 40.
  CHECK(a2av_recv_offsets(60, 3, 1) == std::vector<int64_t>{40, 30, 0});
  // It sends 30, 10, 20 to ranks 0, 1, 2 (parts 2, 0, 1), back to back.
  CHECK(a2av_send_offsets(60, 3, 1) == std::vector<int64_t>{0, 30, 40});
}

TEST_CASE("numbers are fitted into their columns as nccl-tests fits them", "[bench]") {
  CHECK(nccl_number(0.0, 6) == "  0.00");
  CHECK(nccl_number(12.345, 7) == "  12.35");
  CHECK(nccl_number(9999.5, 7) == "9999.50");      // 4 digits: still two decimals in 7
  CHECK(nccl_number(12345.67, 7) == "12345.7");    // 5 digits: one
  CHECK(nccl_number(1234567.0, 7) == "1234567");   // 7 digits: none
  CHECK(nccl_number(12345678.0, 7) == "1.2e+07");  // 8 digits: an exponent
  CHECK(nccl_number(293.31, 6) == "293.31");
  CHECK(nccl_number(2933.1, 6) == "2933.1");
  CHECK(nccl_number(1234567.0, 6) == " 1e+06");
}

TEST_CASE("a rank's links name the peers over each transport, runs as ranges", "[bench]") {
  CHECK(links_summary({}) == "");
  CHECK(links_summary({""}) == "");  // a group of one: no peer
  CHECK(links_summary({"", "shm", "tcp", "tcp"}) == "shm:1 tcp:2,3");
  CHECK(links_summary({"tcp", "tcp", "", "shm"}) == "tcp:0,1 shm:3");  // kinds as they come
  CHECK(links_summary({"", "shm", "tcp", "tcp", "tcp", "shm"}) == "shm:1,5 tcp:2-4");
  CHECK(links_summary({"shm", "shm", "", "shm", "shm"}) == "shm:0,1,3,4");  // self breaks a run
}

TEST_CASE("per-iteration statistics are nccl-tests' (nearest-rank percentiles)", "[bench]") {
  // 1..10: mean 5.5, population variance 8.25, p50 the upper middle (6),
  // p95 and p99 the 10th smallest (ceil(9.5), ceil(9.9)).
  std::vector<double> t = {7, 3, 10, 1, 9, 2, 8, 4, 6, 5};
  const IterStats s = iter_stats(t);
  CHECK(s.min == 1);
  CHECK(s.max == 10);
  CHECK(s.avg == 5.5);
  CHECK(s.p50 == 6);
  CHECK(s.p95 == 10);
  CHECK(s.p99 == 10);
  CHECK(s.stdev == Approx(std::sqrt(8.25)));
  CHECK(s.cv_pct() == Approx(100 * std::sqrt(8.25) / 5.5));
  std::vector<double> hundred(100);
  for (int i = 0; i < 100; ++i) hundred[size_t(i)] = i + 1;
  CHECK(iter_stats(hundred).p95 == 95);
  CHECK(iter_stats(hundred).p99 == 99);
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

// Parses a command line as spmd-bench's main does; returns what it printed
// to stderr, and whether the options came back.
static std::string parse_command(std::vector<std::string> args, bool* ok, int* exit_code) {
  args.insert(args.begin(), "spmd-bench");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::ostringstream err;
  std::streambuf* old = std::cerr.rdbuf(err.rdbuf());
  *exit_code = 0;
  *ok = parse_options(int(argv.size()), argv.data(), exit_code).has_value();
  std::cerr.rdbuf(old);
  return err.str();
}

TEST_CASE("nccl-tests' -t, -g and -m are taken at 1 and refused above, naming the flag",
          "[bench]") {
  bool ok = false;
  int code = 0;
  parse_command({"all_reduce", "-t", "1", "-g", "1", "-m", "1"}, &ok, &code);
  CHECK(ok);
  std::string err = parse_command({"all_reduce", "-g", "2"}, &ok, &code);
  CHECK_FALSE(ok);
  CHECK(code == 2);
  CHECK(err.find("-g/--ngpus 2: spmd uses one device per process") != std::string::npos);
  CHECK(err.find("--nproc-per-node 2") != std::string::npos);
  err = parse_command({"all_reduce", "--nthreads", "4"}, &ok, &code);
  CHECK_FALSE(ok);
  CHECK(err.find("-t/--nthreads 4: spmd runs one rank per process") != std::string::npos);
  err = parse_command({"all_reduce", "-m", "8"}, &ok, &code);
  CHECK_FALSE(ok);
  CHECK(err.find("-m/--agg_iters 8") != std::string::npos);
}

TEST_CASE(
    "nccl-tests' other flags are taken at their default and refused otherwise, each "
    "saying what it does there",
    "[bench]") {
  bool ok = false;
  int code = 0;
  parse_command({"all_reduce", "-G", "0", "-C", "0", "-p", "0", "-N", "1", "-u", "0", "-R", "0",
                 "-S", "0", "-y", "0"},
                &ok, &code);
  CHECK(ok);
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"-G", "1"}, "-G/--cudagraph 1: nccl-tests captures the timed calls in a CUDA graph"},
      {{"--report_cputime", "1"}, "-C/--report_cputime 1: nccl-tests then reports the host time"},
      {{"-p", "1"}, "-p/--parallel_init 1: nccl-tests then initialises the communicators"},
      {{"-N", "0"}, "-N/--run_cycles 0: nccl-tests repeats the whole sweep"},
      {{"-u", "3"}, "-u/--unalign 3: nccl-tests offsets its send and receive buffers"},
      {{"-R", "2"}, "-R/--local_register 2: nccl-tests registers its buffers with NCCL"},
      {{"-S", "1"}, "-S/--report_timestamps 1: nccl-tests adds a timestamp to each row"},
      {{"--stream_null=1"}, "-y/--stream_null 1: nccl-tests then issues on CUDA's default"},
  };
  for (const auto& [flag, says] : refused) {
    std::vector<std::string> args{"all_reduce"};
    args.insert(args.end(), flag.begin(), flag.end());
    const std::string err = parse_command(args, &ok, &code);
    INFO(flag[0] << ": " << err);
    CHECK_FALSE(ok);
    CHECK(code == 2);
    CHECK(err.find(says) != std::string::npos);
    CHECK(err.find(": pass -") != std::string::npos);  // and what to pass instead
  }
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
    for (Placement pl : {Placement::kOutOfPlace, Placement::kInPlace}) {
      if (!offers(op, pl)) continue;
      for (DType dt : {DType::kF32, DType::kBF16, DType::kI64}) {
        Case c(op, pl, dt, dist::ReduceOp::kMax, 0, 4096, *group, Device::cpu());
        c.fill();
        c.launch().wait();
        INFO(op_kind_name(op) << (pl == Placement::kInPlace ? " in place " : " ")
                              << dtype_name(dt));
        CHECK(c.count_wrong() == 0);
      }
    }
  }
  Case c(OpKind::kAllReduce, Placement::kInPlace, DType::kF32, dist::ReduceOp::kSum, 0, 64, *group,
         Device::cpu());
  c.fill();
  c.launch().wait();
  c.input().data<float>()[5] += 1;  // all_reduce is in place: the result lives here
  CHECK(c.count_wrong() == 1);
  // Out of place, all_reduce leaves its input as it was and writes the
  // output; a changed input is counted as wrong too.
  Case oop(OpKind::kAllReduce, Placement::kOutOfPlace, DType::kF32, dist::ReduceOp::kSum, 0, 64,
           *group, Device::cpu());
  oop.fill();
  CHECK(oop.count_wrong() == 16);                     // the output still holds the sentinel
  for (int call = 0; call < 3; ++call) oop.launch();  // -z 0: issued before any completes
  oop.launch().wait();
  CHECK(oop.output().raw_data() != oop.input().raw_data());
  CHECK(oop.count_wrong() == 0);
  oop.input().data<float>()[2] += 1;
  CHECK(oop.count_wrong() == 1);
  // In place, reduce_scatter's output is a block of its input: a wrong value
  // there is counted once, and a result that never arrived is caught.
  Case rs(OpKind::kReduceScatter, Placement::kInPlace, DType::kF32, dist::ReduceOp::kSum, 0, 64,
          *group, Device::cpu());
  rs.fill();
  rs.launch().wait();
  CHECK(rs.output().raw_data() == rs.input().raw_data());
  rs.output().data<float>()[3] = 1000;
  CHECK(rs.count_wrong() == 1);
  // An all_to_allv block that lands in the wrong place is caught.
  Case v(OpKind::kAllToAllv, Placement::kOutOfPlace, DType::kI64, dist::ReduceOp::kSum, 0, 64,
         *group, Device::cpu());
  v.fill();
  CHECK(v.count_wrong() == 8);  // the output still holds the sentinel
  v.launch().wait();
  CHECK(v.count_wrong() == 0);
  dist::destroy_process_group(group);
}
