// What a caller gets wrong is refused at the call, with a message naming the
// op and the values, before anything reaches the wire; and Work's own
// contract (a bounded wait that gives up while the op goes on). These run in
// this process: a group of one, or two ranks as threads over a HashStore.
#include <catch2/catch.hpp>
#include <thread>

#include "harness.h"
#include "parallel/comm/host/host_process_group.h"
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
