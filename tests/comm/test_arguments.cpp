// What a caller gets wrong is refused at the call, with a message naming the
// op and the values, before anything reaches the wire; and Work's own
// contract (a bounded wait that gives up while the op goes on). These run in
// this process: a group of one, or two ranks as threads over a HashStore.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "harness.h"
#include "parallel/comm/host/host_process_group.h"
#include "parallel/comm/tcp/bootstrap.h"
#include "runtime/hash_store.h"
#include "tensor/factory.h"
#include "tensor/views.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {
std::shared_ptr<ProcessGroup> group_of_one() {
  return HostProcessGroup::create(std::make_shared<HashStore>(), 0, 1, GroupOptions{});
}
}  // namespace

TEST_CASE("bad arguments are refused at the call, naming the op and the values", "[comm]") {
  auto g = group_of_one();
  Tensor f = cpu_tensor(6, DType::kF32);
  using Catch::Contains;
  CHECK_THROWS_WITH(g->all_gather(cpu_tensor(5, DType::kF32), f),
                    Contains("all_gather") && Contains("5"));
  CHECK_THROWS_WITH(g->all_gather(cpu_tensor(6, DType::kF64), f), Contains("dtype"));
  CHECK_THROWS_WITH(g->reduce_scatter(cpu_tensor(4, DType::kF32), f),
                    Contains("reduce_scatter") && Contains("6"));
  CHECK_THROWS_WITH(g->all_reduce(cpu_tensor(3, DType::kI32), ReduceOp::kAvg),
                    Contains("avg") && Contains("i32"));
  CHECK_THROWS_WITH(g->all_reduce(cpu_tensor(3, DType::kU8)), Contains("u8"));
  CHECK_THROWS_WITH(g->broadcast(f, 1), Contains("root 1"));
  CHECK_THROWS_WITH(g->reduce(f, -1), Contains("root -1"));
  CHECK_THROWS_WITH(g->send(f, 0), Contains("another rank"));
  CHECK_THROWS_WITH(g->all_reduce(Tensor()), Contains("undefined"));
  Tensor m = ops::zeros(Shape{3, 4});
  CHECK_THROWS_WITH(g->all_reduce(ops::transpose(m, 0, 1)), Contains("contiguous"));
  Tensor m2 = ops::zeros(Shape{3, 4});
  CHECK_THROWS_WITH(g->all_to_all(m2, m, {2}, {3}), Contains("split sizes"));
  CHECK_THROWS_WITH(g->all_to_all(m2, m, {2}, {2}), Contains("add up to 2") && Contains("3"));
  CHECK_THROWS_WITH(g->all_to_all(m, m), Contains("overlaps"));

  CHECK_THROWS_AS(g->new_group({0, 0}), InvalidArgument);
  CHECK_THROWS_AS(g->new_group({1}), InvalidArgument);
  g->shutdown();
  CHECK_THROWS_WITH(g->all_reduce(f), Contains("shut down"));
}

TEST_CASE("Work::wait(timeout) gives up while the collective goes on", "[comm]") {
  auto store = std::make_shared<HashStore>();
  std::shared_ptr<ProcessGroup> g0, g1;
  std::thread t1([&] { g1 = HostProcessGroup::create(store, 1, 2, GroupOptions{}); });
  g0 = HostProcessGroup::create(store, 0, 2, GroupOptions{});
  t1.join();
  Tensor a = ops::full(Shape{10}, 1.0), b = ops::full(Shape{10}, 2.0);
  Work w0 = g0->all_reduce(a);  // rank 1 has not called yet
  CHECK_THROWS_AS(w0.wait(std::chrono::milliseconds(50)), TimeoutError);
  CHECK_FALSE(w0.is_completed());
  Work w1 = g1->all_reduce(b);
  w0.wait();
  w1.wait();
  CHECK(w0.is_success());
  CHECK(w0.exception() == nullptr);
  CHECK(ops::to_vector<float>(a) == std::vector<float>(10, 3.f));
  CHECK(ops::to_vector<float>(b) == std::vector<float>(10, 3.f));
  // Both ranks' Works describe their op.
  CHECK(w0.description() == "all_reduce #0 in group world");
  g0->shutdown();
  g1->shutdown();
}

// The address a rank publishes for its peers (parallel/comm/tcp/bootstrap.h):
// the interface SPMD_SOCKET_IFNAME names, else GLOO_SOCKET_IFNAME's; a name
// with no IPv4 address is an error that lists the interfaces that have one.
TEST_CASE("SPMD_SOCKET_IFNAME and GLOO_SOCKET_IFNAME choose the address a rank publishes",
          "[bootstrap]") {
  using Env = spmd::testing::ScopedEnv;

  {
    Env spmd("SPMD_SOCKET_IFNAME", "lo"), gloo("GLOO_SOCKET_IFNAME", "nosuch0");
    CHECK(dist::tcp::advertised_address("localhost") == "127.0.0.1");  // spmd's name first
  }
  {
    Env spmd("SPMD_SOCKET_IFNAME", nullptr), gloo("GLOO_SOCKET_IFNAME", "lo");
    CHECK(dist::tcp::advertised_address("") == "127.0.0.1");
  }
  {
    Env spmd("SPMD_SOCKET_IFNAME", "nosuch0"), gloo("GLOO_SOCKET_IFNAME", nullptr);
    CHECK_THROWS_WITH(dist::tcp::advertised_address("localhost"),
                      Catch::Contains("SPMD_SOCKET_IFNAME=nosuch0: no interface of that name has "
                                      "an IPv4 address; those that have one: ") &&
                          Catch::Contains("lo (127.0.0.1)"));
  }
  {
    Env spmd("SPMD_SOCKET_IFNAME", nullptr), gloo("GLOO_SOCKET_IFNAME", "nosuch1");
    CHECK_THROWS_WITH(dist::tcp::advertised_address(""),
                      Catch::Contains("GLOO_SOCKET_IFNAME=nosuch1: no interface"));
  }
}

// A rank that cannot reach a peer's published address (bootstrap.h) says
// which peer, at which address, and from which address of its own: here
// rank 1 of a group whose rank 0 "published" a port nothing listens on. The
// rank that waits for peers that never connect names the address it
// listens at.
TEST_CASE("a peer it cannot connect to is named with its address", "[bootstrap]") {
  std::shared_ptr<Store> store = std::make_shared<HashStore>();
  store->set("g/addr/0", "127.0.0.1:1");  // port 1: refused (nothing listens there)
  std::string error;
  try {
    dist::tcp::connect_mesh(*store, "g", 1, 2, std::chrono::milliseconds(300), "127.0.0.1");
  } catch (const TimeoutError& e) {
    error = e.what();
  }
  CHECK_THAT(error, Catch::Contains("group g: rank 1 (at 127.0.0.1) cannot connect to rank 0 at "
                                    "127.0.0.1:1, the address that rank published") &&
                        Catch::Contains("SPMD_SOCKET_IFNAME") && Catch::Contains("refused"));
  // Rank 0 of the same group: rank 1 never connects to it.
  std::string waited;
  try {
    dist::tcp::connect_mesh(*std::make_shared<HashStore>(), "g", 0, 2,
                            std::chrono::milliseconds(200), "127.0.0.1");
  } catch (const TimeoutError& e) {
    waited = e.what();
  }
  CHECK_THAT(waited, Catch::Contains("group g: rank 0 listening at 127.0.0.1:") &&
                         Catch::Contains(" waited 200 ms for ranks [1] to connect"));
  CHECK(dist::tcp::mesh_connect_error("w", 2, "10.0.0.2", 0, "10.9.0.1:4000", "unreachable") ==
        "group w: rank 2 (at 10.0.0.2) cannot connect to rank 0 at 10.9.0.1:4000, the address "
        "that rank published (SPMD_SOCKET_IFNAME, GLOO_SOCKET_IFNAME or the route to the store "
        "chose it): unreachable");
}
