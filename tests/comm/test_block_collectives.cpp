// gather, scatter and all_to_allv on the TCP backend, in real processes over
// loopback, for world sizes 1 to 5, every root, out of place and in place,
// against values worked out by hand; ranks that disagree on a block size are
// told so by the root; and the arguments a caller gets wrong are refused at
// the call. Every wait is bounded by the group's timeout.
#include <catch2/catch.hpp>
#include <numeric>
#include <vector>

#include "harness.h"
#include "parallel/comm/host/host_process_group.h"
#include "parallel/comm/init.h"
#include "runtime/hash_store.h"
#include "tensor/factory.h"
#include "tensor/views.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

template <class T>
void set_values(const Tensor& t, const std::function<double(int64_t)>& value) {
  T* p = static_cast<T*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = T(value(i));
}

template <class T>
Tensor filled(int64_t n, DType dt, const std::function<double(int64_t)>& value) {
  Tensor t = cpu_tensor(n, dt);
  set_values<T>(t, value);
  return t;
}

// Throws naming the first element of t (read as T) that differs from want(i).
template <class T>
void check(const Tensor& t, const std::function<double(int64_t)>& want, const std::string& what) {
  const T* p = static_cast<const T*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    expect(double(p[i]) == want(i), what, ": element ", i, " is ", double(p[i]), ", expected ",
           want(i));
  }
}

// Rank r's block for gather: 10·r + i (exact in every dtype for these sizes).
double gathered(int r, int64_t i) { return 10.0 * r + double(i); }

template <class T>
void gather_cases(ProcessGroup& g, DType dt, int64_t n) {
  const int p = g.size(), r = g.rank();
  for (int root = 0; root < p; ++root) {
    const std::string at = str_cat("gather of ", n, " to root ", root);
    Tensor mine = filled<T>(n, dt, [&](int64_t i) { return gathered(r, i); });
    Tensor out = r == root ? filled<T>(n * p, dt, [](int64_t) { return -1; }) : Tensor();
    g.gather(out, mine, root).wait();
    check<T>(
        mine, [&](int64_t i) { return gathered(r, i); }, at + ": input untouched");
    if (r == root)
      check<T>(
          out, [&](int64_t j) { return gathered(int(j / n), j % n); }, at);
    // In place: the root's input is its block of the output.
    if (r == root) {
      out = filled<T>(n * p, dt, [](int64_t) { return -1; });
      mine = ops::narrow(out, 0, root * n, n);
      set_values<T>(mine, [&](int64_t i) { return gathered(r, i); });
    }
    g.gather(out, mine, root).wait();
    if (r == root) {
      check<T>(
          out, [&](int64_t j) { return gathered(int(j / n), j % n); }, at + " in place");
    }
  }
}

template <class T>
void scatter_cases(ProcessGroup& g, DType dt, int64_t n) {
  const int p = g.size(), r = g.rank();
  for (int root = 0; root < p; ++root) {
    const std::string at = str_cat("scatter of ", n, " from root ", root);
    // The root's input holds 1, 2, 3, ...: rank r must get r·n + 1 onwards.
    Tensor in =
        r == root ? filled<T>(n * p, dt, [](int64_t j) { return double(j + 1); }) : Tensor();
    Tensor out = filled<T>(n, dt, [](int64_t) { return -1; });
    g.scatter(out, in, root).wait();
    check<T>(
        out, [&](int64_t i) { return double(r * n + i + 1); }, at);
    if (r == root)
      check<T>(
          in, [](int64_t j) { return double(j + 1); }, at + ": input untouched");
    // In place: the root's output is its block of the input.
    if (r == root) out = ops::narrow(in, 0, root * n, n);
    g.scatter(out, in, root).wait();
    check<T>(
        out, [&](int64_t i) { return double(r * n + i + 1); }, at + " in place");
  }
}

// all_to_allv: rank r sends c(r, j) = (r + j) % 3 elements (0, 1 or 2) to
// rank j, valued 100·r + 10·j + t. Both tensors keep their blocks in reverse
// rank order with one spare element after each, so the offsets are not the
// counts' running sums and the output's gaps must stay -1.
int64_t count_from(int r, int j) { return (r + j) % 3; }

std::vector<int64_t> reversed_offsets(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets(counts.size());
  int64_t at = 0;
  for (size_t k = counts.size(); k-- > 0;) {
    offsets[k] = at;
    at += counts[k] + 1;
  }
  return offsets;
}

void all_to_allv_case(ProcessGroup& g) {
  const int p = g.size(), r = g.rank();
  std::vector<int64_t> send(p), recv(p);
  for (int j = 0; j < p; ++j) send[j] = count_from(r, j), recv[j] = count_from(j, r);
  const std::vector<int64_t> send_at = reversed_offsets(send), recv_at = reversed_offsets(recv);
  const int64_t in_n = send_at[0] + send[0] + 1, out_n = recv_at[0] + recv[0] + 1;
  Tensor in = filled<int64_t>(in_n, DType::kI64, [](int64_t) { return -2; });
  auto* pin = static_cast<int64_t*>(in.raw_data());
  for (int j = 0; j < p; ++j) {
    for (int64_t t = 0; t < send[j]; ++t) pin[send_at[j] + t] = 100 * r + 10 * j + t;
  }
  Tensor out = filled<int64_t>(out_n, DType::kI64, [](int64_t) { return -1; });
  g.all_to_allv(out, in, recv, send, recv_at, send_at).wait();
  std::vector<double> want(size_t(out_n), -1);
  for (int s = 0; s < p; ++s) {
    for (int64_t t = 0; t < recv[s]; ++t) want[size_t(recv_at[s] + t)] = 100 * s + 10 * r + t;
  }
  check<int64_t>(
      out, [&](int64_t i) { return want[size_t(i)]; }, "all_to_allv");
  // Without offsets the blocks lie back to back, in rank order.
  Tensor packed = cpu_tensor(std::accumulate(recv.begin(), recv.end(), int64_t(0)), DType::kI64);
  Tensor flat_in = cpu_tensor(std::accumulate(send.begin(), send.end(), int64_t(0)), DType::kI64);
  auto* pf = static_cast<int64_t*>(flat_in.raw_data());
  for (int j = 0, at = 0; j < p; ++j) {
    for (int64_t t = 0; t < send[j]; ++t) pf[at++] = 100 * r + 10 * j + t;
  }
  g.all_to_allv(packed, flat_in, recv, send).wait();
  std::vector<double> packed_want;
  for (int s = 0; s < p; ++s) {
    for (int64_t t = 0; t < recv[s]; ++t) packed_want.push_back(100 * s + 10 * r + t);
  }
  check<int64_t>(
      packed, [&](int64_t i) { return packed_want[size_t(i)]; }, "packed all_to_allv");
  // Two output blocks that share an element are refused on every rank, at the call.
  if (p >= 2) {
    std::vector<int64_t> same_place(p, 0);
    bool refused = false;
    try {
      g.all_to_allv(out, in, std::vector<int64_t>(p, 1), std::vector<int64_t>(p, 1), same_place,
                    same_place);
    } catch (const InvalidArgument& e) {
      refused = std::string(e.what()).find("overlap") != std::string::npos;
    }
    expect(refused, "overlapping output blocks must be refused");
  }
}

}  // namespace

TEST_CASE("gather, scatter and all_to_allv give the hand-worked values", "[comm]") {
  for (int world : {1, 2, 3, 5}) {
    INFO("world size " << world);
    REQUIRE_NOTHROW(run_world(world, [](ProcessGroup& g) {
      for (int64_t n : {0, 1, 7, 1000}) {
        gather_cases<float>(g, DType::kF32, n);
        scatter_cases<float>(g, DType::kF32, n);
      }
      gather_cases<int32_t>(g, DType::kI32, 33);
      scatter_cases<double>(g, DType::kF64, 33);
      gather_cases<float>(g, DType::kF32, (1 << 18) + 3);  // larger than a socket buffer
      scatter_cases<float>(g, DType::kF32, (1 << 18) + 3);
      all_to_allv_case(g);
      const CommStats s = g.stats();
      expect(s[OpType::kGather].calls == 2 * 6 * uint64_t(g.size()), "gather calls counted");
      expect(s[OpType::kAllToAllv].calls == 2, "all_to_allv calls counted");
    }));
  }
}

TEST_CASE("a rank whose gather block differs in size is named by the root", "[comm][failure]") {
  const int world = 3;
  auto outcomes = run_processes(world, [&](int rank, const std::string& store) {
    InitOptions init;
    init.init_method = "file://" + store;
    init.rank = rank;
    init.world_size = world;
    init.timeout = std::chrono::seconds(5);
    auto g = init_process_group(init);
    Tensor mine = cpu_tensor(rank == 2 ? 9 : 10, DType::kF32);
    Tensor out = rank == 0 ? cpu_tensor(30, DType::kF32) : Tensor();
    try {
      g->gather(out, mine, 0).wait();
      report("ok");
    } catch (const InvalidArgument& e) {
      report(str_cat("invalid: ", e.what()));
    } catch (const Error& e) {
      report(str_cat("error: ", e.what()));
    }
  });
  INFO(outcomes[0].report);
  CHECK(outcomes[0].exited_ok());
  CHECK_THAT(outcomes[0].report, Catch::StartsWith("invalid: gather #0") &&
                                     Catch::Contains("different sizes") &&
                                     Catch::Contains("9 f32"));
}

TEST_CASE("gather, scatter and all_to_allv refuse bad arguments at the call", "[comm]") {
  auto g = HostProcessGroup::create(std::make_shared<HashStore>(), 0, 1, GroupOptions{});
  using Catch::Contains;
  Tensor four = cpu_tensor(4, DType::kF32), three = cpu_tensor(3, DType::kF32);
  CHECK_THROWS_WITH(g->gather(four, three, 0), Contains("gather") && Contains("1 x 3"));
  CHECK_THROWS_WITH(g->gather(four, four, 1), Contains("root 1"));
  CHECK_THROWS_WITH(g->gather(Tensor(), four, 0), Contains("output tensor is undefined"));
  CHECK_THROWS_WITH(g->gather(cpu_tensor(4, DType::kI32), four, 0), Contains("dtype"));
  CHECK_THROWS_WITH(g->scatter(three, four, 0), Contains("scatter") && Contains("3"));
  CHECK_THROWS_WITH(g->scatter(four, Tensor(), 0), Contains("input tensor is undefined"));
  CHECK_THROWS_WITH(g->scatter(four, four, -1), Contains("root -1"));
  Tensor eight = cpu_tensor(8, DType::kF32);
  CHECK_THROWS_WITH(g->gather(ops::narrow(eight, 0, 0, 4), ops::narrow(eight, 0, 2, 4), 0),
                    Contains("other than as the root's block"));
  CHECK_THROWS_WITH(g->all_to_allv(four, three, {4, 1}, {3}), Contains("2 output counts"));
  CHECK_THROWS_WITH(g->all_to_allv(four, three, {5}, {5}), Contains("ends past"));
  CHECK_THROWS_WITH(g->all_to_allv(four, three, {-1}, {3}), Contains("negative output count"));
  CHECK_THROWS_WITH(g->all_to_allv(four, three, {2}, {3}), Contains("expects 2 from itself"));
  CHECK_THROWS_WITH(g->all_to_allv(four, three, {3}, {3}, {0, 0}, {}),
                    Contains("2 output offsets"));
  CHECK_THROWS_WITH(g->all_to_allv(eight, ops::narrow(eight, 0, 0, 2), {2}, {2}),
                    Contains("overlaps"));
  // The one rank's block lands at offset 1; elements 0 and 3 keep their values.
  float* o = static_cast<float*>(four.raw_data());
  std::fill_n(o, 4, -1.f);
  std::fill_n(static_cast<float*>(three.raw_data()), 3, 5.f);
  g->all_to_allv(four, three, {2}, {2}, {1}, {1}).wait();
  CHECK(std::vector<float>(o, o + 4) == std::vector<float>{-1, 5, 5, -1});
  g->shutdown();
}
