// The fake process group (parallel/comm/fake/fake_process_group.h): one rank
// of a world that is not there. Each call is logged with its group and
// payload and completes at once; a DeviceMesh of 16,384 ranks is built with
// no peer, its groups the lines the grid arithmetic names; tensors with
// bytes hold what they would if every peer held this rank's values; and
// SPMD_BACKEND=fake makes init_process_group return one. Its log against a
// real run's accounting is tests/train/test_dry_run.cpp's.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>

#include "parallel/comm/fake/fake_process_group.h"
#include "parallel/comm/init.h"
#include "parallel/device_mesh.h"
#include "tensor/ops.h"

using namespace spmd;
using namespace spmd::dist;

namespace {

Tensor meta_f32(const Shape& shape) { return ops::empty(shape, {DType::kF32, Device::meta()}); }

}  // namespace

TEST_CASE("fake group: each call is logged with its group and payload, and done at once",
          "[comm][fake]") {
  const auto world = FakeProcessGroup::create(5, 16384);
  const Tensor grad = meta_f32({1024});  // 4 kB
  const Tensor shard = meta_f32({8}), gathered = meta_f32({8 * 16384});
  CHECK(world->all_reduce(grad).is_completed());
  world->all_gather(gathered, shard).wait(std::chrono::seconds(1));
  world->reduce_scatter(shard, gathered).wait(std::chrono::seconds(1));
  world->send(grad, 6).wait(std::chrono::seconds(1));
  world->recv(grad, 4).wait(std::chrono::seconds(1));
  const std::vector<FakeCall> calls = world->log()->calls();
  REQUIRE(calls.size() == 5);
  CHECK(calls[0].op == OpType::kAllReduce);
  CHECK(calls[0].bytes == 4096);
  CHECK(calls[1].bytes == 8 * 16384 * 4);  // the gathered output
  CHECK(calls[2].bytes == 8 * 16384 * 4);  // the scattered input
  CHECK(calls[3].peer == 6);
  CHECK(calls[4].op == OpType::kRecv);
  for (const FakeCall& c : calls) CHECK(c.group == "world");
  // The same payloads the group's own accounting counts.
  const CommStats stats = world->stats();
  CHECK(stats[OpType::kAllReduce].bytes == 4096);
  CHECK(stats[OpType::kAllGather].bytes == calls[1].bytes);
  CHECK(stats[OpType::kReduceScatter].bytes == calls[2].bytes);
}

TEST_CASE("fake group: a mesh of 16,384 ranks is built with no peer, its lines the grid's",
          "[comm][fake]") {
  const auto start = std::chrono::steady_clock::now();
  const int rank = 12345;
  const auto world = FakeProcessGroup::create(rank, 16384);
  DeviceMesh mesh(world, {16, 128, 8}, {"pp", "dp_shard", "tp"});
  const DeviceMesh dp = mesh.flatten({"pp", "dp_shard"}, "pp_dp");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  CHECK(mesh.size("tp") == 8);
  CHECK(mesh.size("pp_dp") == 2048);
  // 12345 = 12 x 1024 + 7 x 8 + 1: tp line 12344..12351, dp_shard line
  // 12 x 1024 + 1 + 8 j, pp line 57 + 1024 i.
  std::vector<std::vector<int>> lines;
  for (const FakeGroup& g : world->log()->groups())
    if (g.name != "world") lines.push_back(g.global_ranks);
  REQUIRE(lines.size() == 4);  // pp, dp_shard, tp, then the flattening
  CHECK(lines[0] == mesh_line_ranks({16, 128, 8}, rank, {0}));
  CHECK(lines[0][3] == 57 + 3 * 1024);
  CHECK(lines[1][2] == 12 * 1024 + 1 + 2 * 8);
  CHECK(lines[2] == std::vector<int>{12344, 12345, 12346, 12347, 12348, 12349, 12350, 12351});
  CHECK(lines[3] == mesh_line_ranks({16, 128, 8}, rank, {0, 1}));
  CHECK(mesh.group("tp").rank() == 1);
}

TEST_CASE("fake group: tensors with bytes hold what every peer holding this rank's gives",
          "[comm][fake]") {
  const auto g = FakeProcessGroup::create(1, 4);
  const Tensor sum = ops::from_vector(std::vector<float>{1, 2}, {2});
  g->all_reduce(sum).wait();
  CHECK(ops::to_vector<float>(sum) == std::vector<float>{4, 8});  // 4 ranks x the value
  const Tensor avg = ops::from_vector(std::vector<float>{1, 2}, {2});
  g->all_reduce(avg, ReduceOp::kAvg).wait();
  CHECK(ops::to_vector<float>(avg) == std::vector<float>{1, 2});
  const Tensor all = ops::zeros({8}, {DType::kF32});
  g->all_gather(all, ops::from_vector(std::vector<float>{3, 5}, {2})).wait();
  CHECK(ops::to_vector<float>(all) == std::vector<float>{3, 5, 3, 5, 3, 5, 3, 5});
  const Tensor out = ops::zeros({2}, {DType::kF32});
  g->reduce_scatter(out, ops::from_vector(std::vector<float>{0, 0, 6, 7, 0, 0, 0, 0}, {8})).wait();
  CHECK(ops::to_vector<float>(out) == std::vector<float>{24, 28});  // segment 1, x 4
}

TEST_CASE("fake group: SPMD_BACKEND=fake joins as RANK of WORLD_SIZE with no rendezvous",
          "[comm][fake]") {
  ::setenv("SPMD_BACKEND", "fake", 1);
  ::setenv("RANK", "3", 1);
  ::setenv("WORLD_SIZE", "1000", 1);
  InitOptions options;  // the TCP backend, unless SPMD_BACKEND says otherwise
  std::shared_ptr<ProcessGroup> world = init_process_group(options);
  ::unsetenv("SPMD_BACKEND");
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  CHECK(world->backend() == CommBackend::kFake);
  CHECK(world->rank() == 3);
  CHECK(world->size() == 1000);
  CHECK_THROWS_WITH(FakeProcessGroup::create(4, 4), Catch::Contains("rank 4 is not in [0, 4)"));
  CHECK(parse_backend("fake") == CommBackend::kFake);
}
