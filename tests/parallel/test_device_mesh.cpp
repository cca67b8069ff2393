// DeviceMesh: the grid arithmetic against grids worked out by hand (no
// communication), the errors for bad shapes and names, and a real 2 x 2
// mesh whose per-axis groups sum the ranks they should.
#include <catch2/catch.hpp>

#include "ddp_test_util.h"
#include "harness.h"
#include "parallel/device_mesh.h"
#include "tensor/ops.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

TEST_CASE("a 1-D mesh is one line of every rank", "[mesh]") {
  CHECK(mesh_coordinate({4}, 3) == std::vector<int64_t>{3});
  CHECK(mesh_line_ranks({4}, 2, {0}) == std::vector<int>{0, 1, 2, 3});
}

TEST_CASE("a 2-D mesh: the chapter's two replicas of four partitions", "[mesh]") {
  //          tp=0 tp=1 tp=2 tp=3
  //   dp=0     0    1    2    3
  //   dp=1     4    5    6    7
  const std::vector<int64_t> shape{2, 4};
  CHECK(mesh_coordinate(shape, 5) == std::vector<int64_t>{1, 1});
  CHECK(mesh_coordinate(shape, 3) == std::vector<int64_t>{0, 3});
  CHECK(mesh_line_ranks(shape, 5, {1}) == std::vector<int>{4, 5, 6, 7});  // tp group
  CHECK(mesh_line_ranks(shape, 5, {0}) == std::vector<int>{1, 5});        // dp group
  CHECK(mesh_line_ranks(shape, 2, {0}) == std::vector<int>{2, 6});
  CHECK(mesh_line_ranks(shape, 6, {0, 1}) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("a 3-D mesh: pp x dp x tp = 2 x 3 x 2", "[mesh]") {
  // rank = 6 pp + 2 dp + tp
  const std::vector<int64_t> shape{2, 3, 2};
  CHECK(mesh_coordinate(shape, 9) == std::vector<int64_t>{1, 1, 1});
  CHECK(mesh_line_ranks(shape, 9, {2}) == std::vector<int>{8, 9});      // tp
  CHECK(mesh_line_ranks(shape, 9, {1}) == std::vector<int>{7, 9, 11});  // dp
  CHECK(mesh_line_ranks(shape, 9, {0}) == std::vector<int>{3, 9});      // pp
  CHECK(mesh_line_ranks(shape, 9, {1, 2}) == std::vector<int>{6, 7, 8, 9, 10, 11});
  CHECK(mesh_line_ranks(shape, 4, {0, 1}) == std::vector<int>{0, 2, 4, 6, 8, 10});
  // Every rank's lines along one axis partition the world.
  for (int axis = 0; axis < 3; ++axis) {
    std::vector<int> seen(12, 0);
    for (int r = 0; r < 12; ++r) {
      const auto line = mesh_line_ranks(shape, r, {axis});
      CHECK(std::count(line.begin(), line.end(), r) == 1);
      if (line.front() == r) {
        for (int m : line) ++seen[m];
      }
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
  }
}

TEST_CASE("bad mesh shapes and names are refused, naming them", "[mesh]") {
  CHECK_THROWS_WITH(check_mesh_shape({2, 3}, {"dp", "tp"}, 8),
                    Catch::Contains("dp:2 x tp:3 holds 6 ranks but the world has 8"));
  CHECK_THROWS_WITH(check_mesh_shape({2, 4}, {"tp", "tp"}, 8),
                    Catch::Contains("\"tp\" is repeated"));
  CHECK_THROWS_WITH(check_mesh_shape({2, 4}, {"dp"}, 8),
                    Catch::Contains("2 dims but 1 axis names"));
  CHECK_THROWS_WITH(check_mesh_shape({0, 8}, {"dp", "tp"}, 8), Catch::Contains("size 0"));
  CHECK_NOTHROW(check_mesh_shape({1, 8}, {"dp", "tp"}, 8));
}

TEST_CASE("a real 2 x 2 mesh: each axis group sums its own line", "[mesh]") {
  run_world(4, [](ProcessGroup& world) {
    DeviceMesh mesh(borrow(world), {2, 2}, {"dp", "tp"});
    const int r = world.rank();
    expect(mesh.coordinate() == std::vector<int64_t>{r / 2, r % 2}, "coordinate");
    expect(mesh.size("tp") == 2 && mesh.size("dp") == 2 && mesh.size() == 4, "sizes");
    // The tp line of rank r is {2 (r/2), 2 (r/2) + 1}: sums 4 (r/2) + 1.
    Tensor t = ops::full({1}, double(r), {DType::kF64});
    mesh.group("tp").all_reduce(t).wait();
    expect(t.item<double>() == 4 * (r / 2) + 1, "tp sum ", t.item<double>());
    // The dp line of rank r is {r % 2, r % 2 + 2}: sums 2 (r % 2) + 2.
    Tensor d = ops::full({1}, double(r), {DType::kF64});
    mesh["dp"].group("dp").all_reduce(d).wait();
    expect(d.item<double>() == 2 * (r % 2) + 2, "dp sum ", d.item<double>());
    expect(mesh.group("dp").global_rank(1) == r % 2 + 2, "dp global ranks");
    // Flattened: every rank, ordered row-major.
    DeviceMesh all = mesh.flatten({"dp", "tp"}, "dp_tp");
    expect(all.size() == 4 && mesh.coordinate("dp_tp") == r, "flattened coordinate");
    Tensor f = ops::full({1}, double(r), {DType::kF64});
    mesh.group("dp_tp").all_reduce(f).wait();
    expect(f.item<double>() == 6, "flattened sum");
    bool threw = false;
    try {
      mesh.group("cp");
    } catch (const InvalidArgument& e) {
      threw = std::string(e.what()).find("no axis named \"cp\"") != std::string::npos;
    }
    expect(threw, "unknown axis");
  });
}
