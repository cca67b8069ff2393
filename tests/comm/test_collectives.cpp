// Every collective of the TCP backend, in real processes over loopback, for
// world sizes 1, 2, 3, 4 and 8, every dtype and sizes 0, 1, 7, 1000 and
// 2^20 + 3 (the large size for f32 only, to keep the suite fast), against
// values worked out by hand (values.h). One spawn per world size runs the
// whole table, so the suite stays within seconds even with 8 ranks on 2 cores.
#include <catch2/catch.hpp>
#include <vector>

#include "autograd/autograd.h"
#include "harness.h"
#include "tensor/ops.h"
#include "tensor/views.h"
#include "values.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

const DType kDtypes[] = {DType::kF32, DType::kF64, DType::kBF16,
                         DType::kF16, DType::kI32, DType::kI64};

std::vector<int64_t> sizes_for(DType dt) {
  if (dt == DType::kF32) return {0, 1, 7, 1000, (1 << 20) + 3};
  return {0, 1, 7, 1000};
}

void expect_throws(const std::function<void()>& fn, const char* what) {
  try {
    fn();
  } catch (const InvalidArgument&) {
    return;
  }
  throw Error(what);
}

template <class T>
void fill(const Tensor& t, const std::function<double(size_t)>& value) {
  T* p = static_cast<T*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = T(value(size_t(i)));
}

// Throws naming the first element of t that differs from want(i).
template <class T>
void check(const Tensor& t, const std::function<double(size_t)>& want, const std::string& what) {
  const T* p = static_cast<const T*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double got = double(p[i]);
    expect(got == want(size_t(i)), what, " (", dtype_name(t.dtype()), ", ", t.numel(),
           " elements): element ", i, " is ", got, ", expected ", want(size_t(i)));
  }
}

void all_reduce_cases(ProcessGroup& g, DType dt, int64_t n) {
  const int p = g.size(), r = g.rank();
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd}) {
    if (op == ReduceOp::kAvg && !is_floating(dt)) continue;
    if (op != ReduceOp::kSum && n > 1000) continue;  // the large size: sum only
    Tensor t = cpu_tensor(n, dt);
    visit_dtype(dt, [&]<class T>() {
      fill<T>(t, [&](size_t i) { return input_value(op, r, i); });
      g.all_reduce(t, op).wait();
      check<T>(
          t, [&](size_t i) { return reduced_value(op, p, i); },
          str_cat("all_reduce ", reduce_op_name(op)));
    });
  }
}

void rooted_cases(ProcessGroup& g, DType dt, int64_t n) {
  const int p = g.size(), r = g.rank();
  const int root = p - 1;
  Tensor t = cpu_tensor(n, dt);
  visit_dtype(dt, [&]<class T>() {
    fill<T>(t, [&](size_t i) { return r == root ? double(i % 7 + root) : -1.0; });
    g.broadcast(t, root).wait();
    check<T>(
        t, [&](size_t i) { return double(i % 7 + root); }, "broadcast");
    fill<T>(t, [&](size_t i) { return input_value(ReduceOp::kSum, r, i); });
    g.reduce(t, root, ReduceOp::kSum).wait();
    check<T>(
        t,
        [&](size_t i) {
          return r == root ? reduced_value(ReduceOp::kSum, p, i)
                           : input_value(ReduceOp::kSum, r, i);
        },
        "reduce (root's result, the others' input unchanged)");
  });
}

void gather_scatter_cases(ProcessGroup& g, DType dt, int64_t m) {
  const int p = g.size(), r = g.rank();
  Tensor mine = cpu_tensor(m, dt), all = cpu_tensor(p * m, dt);
  visit_dtype(dt, [&]<class T>() {
    fill<T>(mine, [&](size_t i) { return double(r * 10 + i % 7); });
    g.all_gather(all, mine).wait();
    check<T>(
        all, [&](size_t i) { return double(i / m * 10 + (i % m) % 7); }, "all_gather");
    fill<T>(all, [&](size_t i) { return input_value(ReduceOp::kSum, r, i); });
    g.reduce_scatter(mine, all, ReduceOp::kSum).wait();
    check<T>(
        mine, [&](size_t i) { return reduced_value(ReduceOp::kSum, p, r * m + i); },
        "reduce_scatter (rank r's segment)");
  });
}

// Rank s sends (s + d) % 3 + 1 rows of 2 elements to rank d, valued s*10 + d.
void all_to_all_cases(ProcessGroup& g, DType dt) {
  const int p = g.size(), r = g.rank();
  auto rows = [](int s, int d) { return int64_t((s + d) % 3 + 1); };
  std::vector<int64_t> in_splits(p), out_splits(p);
  int64_t in_rows = 0, out_rows = 0;
  for (int d = 0; d < p; ++d) {
    in_rows += in_splits[d] = rows(r, d);
    out_rows += out_splits[d] = rows(d, r);
  }
  auto matrix = [&](int64_t n_rows) {
    Tensor flat = cpu_tensor(n_rows * 2, dt);
    return Tensor(flat.storage(), Shape{n_rows, 2}, Shape{2, 1}, 0, dt);
  };
  Tensor in = matrix(in_rows), out = matrix(out_rows);
  visit_dtype(dt, [&]<class T>() {
    std::vector<double> sent, want;
    for (int d = 0; d < p; ++d) sent.insert(sent.end(), rows(r, d) * 2, r * 10 + d);
    for (int s = 0; s < p; ++s) want.insert(want.end(), rows(s, r) * 2, s * 10 + r);
    fill<T>(in, [&](size_t i) { return sent[i]; });
    g.all_to_all(out, in, out_splits, in_splits).wait();
    check<T>(
        out, [&](size_t i) { return want[i]; }, "all_to_all (uneven splits)");
    // Equal splits: p rows of 2, row d going to rank d.
    Tensor ein = matrix(p), eout = matrix(p);
    fill<T>(ein, [&](size_t i) { return double(r * 10 + int(i / 2)); });
    g.all_to_all(eout, ein).wait();
    check<T>(
        eout, [&](size_t i) { return double(int(i / 2) * 10 + r); }, "all_to_all (equal)");
  });
}

void every_collective(ProcessGroup& g) {
  for (DType dt : kDtypes) {
    for (int64_t n : sizes_for(dt)) {
      all_reduce_cases(g, dt, n);
      if (n <= 1000) {
        rooted_cases(g, dt, n);
        gather_scatter_cases(g, dt, n);
      }
    }
    all_to_all_cases(g, dt);
  }
  g.barrier().wait();
}

}  // namespace

TEST_CASE("every collective, dtype and size on 1, 2, 3, 4 and 8 ranks", "[comm]") {
  for (int world : {1, 2, 3, 4, 8}) {
    INFO("world size " << world);
    REQUIRE_NOTHROW(run_world(world, every_collective));
  }
}

TEST_CASE("a 64 MiB all_reduce sums exactly on 2 ranks", "[comm]") {
  REQUIRE_NOTHROW(run_world(2, [](ProcessGroup& g) {
    const int64_t n = (64 << 20) / 4;
    Tensor t = cpu_tensor(n, DType::kF32);
    fill<float>(t, [&](size_t i) { return input_value(ReduceOp::kSum, g.rank(), i); });
    g.all_reduce(t).wait();
    check<float>(
        t, [&](size_t i) { return reduced_value(ReduceOp::kSum, 2, i); }, "64 MiB");
  }));
}

TEST_CASE("many collectives in flight at once, waited out of order", "[comm]") {
  REQUIRE_NOTHROW(run_world(4, [](ProcessGroup& g) {
    const int p = g.size();
    std::vector<Tensor> tensors;
    std::vector<Work> works;
    for (int k = 0; k < 24; ++k) {
      Tensor t = cpu_tensor(1 + k * 997, DType::kF32);  // small and ring-sized alike
      fill<float>(t, [&](size_t i) { return input_value(ReduceOp::kSum, g.rank(), i + k); });
      works.push_back(g.all_reduce(t));
      tensors.push_back(t);
    }
    for (int k = 23; k >= 0; --k) {
      works[k].wait();
      check<float>(
          tensors[k], [&](size_t i) { return reduced_value(ReduceOp::kSum, p, i + k); },
          str_cat("all_reduce ", k, " of 24 in flight"));
    }
    for (auto& w : works) expect(w.is_completed() && w.is_success(), "a Work was not done");
  }));
}

TEST_CASE("in place: all_gather from its own block, reduce_scatter into its own segment",
          "[comm]") {
  REQUIRE_NOTHROW(run_world(3, [](ProcessGroup& g) {
    const int p = g.size(), r = g.rank();
    const int64_t m = 1001;
    Tensor all = cpu_tensor(p * m, DType::kF32);
    Tensor mine = ops::narrow(all, 0, r * m, m);  // a view of block r
    fill<float>(all, [&](size_t i) { return i / m == size_t(r) ? double(r * 10 + i % 7) : -1.0; });
    g.all_gather(all, mine).wait();
    check<float>(
        all, [&](size_t i) { return double(i / m * 10 + i % 7); }, "in-place all_gather");
    fill<float>(all, [&](size_t i) { return input_value(ReduceOp::kSum, r, i); });
    g.reduce_scatter(mine, all).wait();
    check<float>(
        mine, [&](size_t i) { return reduced_value(ReduceOp::kSum, p, r * m + i); },
        "in-place reduce_scatter");
    expect_throws([&] { g.all_to_all(all, all); }, "all_to_all in place must be refused");
  }));
}

TEST_CASE("a collective moves its output's version counter, as an in-place op does", "[comm]") {
  REQUIRE_NOTHROW(run_world(2, [](ProcessGroup& g) {
    auto version = [](const Tensor& t) { return t.storage()->version(); };
    auto expect_moved = [&](const Tensor& t, uint64_t before, const char* op) {
      expect(version(t) > before, op, " left its output's version counter at ", before);
    };
    Tensor t = cpu_tensor(6, DType::kF32);
    fill<float>(t, [](size_t) { return 1.0; });
    uint64_t v = version(t);
    g.all_reduce(t).wait();
    expect_moved(t, v, "all_reduce");
    v = version(t);
    g.broadcast(t, 0).wait();  // on the root too, as PyTorch's broadcast_
    expect_moved(t, v, "broadcast");

    Tensor block = cpu_tensor(3, DType::kF32);
    fill<float>(block, [](size_t) { return 2.0; });
    const uint64_t in = version(block);
    v = version(t);
    g.all_gather(t, block).wait();
    expect_moved(t, v, "all_gather");
    expect(version(block) == in, "all_gather moved its input's version counter");

    const uint64_t before_p2p = version(block);
    if (g.rank() == 0) {
      g.send(block, 1).wait();
      expect(version(block) == before_p2p, "send moved its tensor's version counter");
    } else {
      g.recv(block, 0).wait();
      expect_moved(block, before_p2p, "recv");
    }

    // What the counter is for: a tensor saved for backward and then
    // all_reduced in place makes backward fail, naming the op that saved it.
    Tensor x = ops::from_vector(std::vector<double>{1, 2, 3}, {3});
    x.requires_grad_();
    Tensor e = exp(x);  // exp saves its output
    Tensor loss = sum(e);
    g.all_reduce(detach(e)).wait();  // the same storage, outside the graph
    try {
      backward(loss);
    } catch (const Error& err) {
      const std::string what = err.what();
      expect(what.find("modified in place") != std::string::npos, "unexpected error: ", what);
      return;
    }
    throw Error("backward ran through a saved tensor that all_reduce overwrote");
  }));
}

// Sizes the group's shared segment takes by default (shm/tuning.h,
// shm/segment_collectives.h: from 64 KiB, a 1 MiB slot per rank), odd so that no chunk or part comes
// out even: broadcast in 2 chunks, all_gather in 2, reduce_scatter in 3;
// with averages and maxima, in place and not. Over TCP (the _tcp variant)
// the same calls take the trees and rings.
TEST_CASE("broadcast, all_gather and reduce_scatter of segment sizes on 3 ranks", "[comm]") {
  REQUIRE_NOTHROW(run_world(3, [](ProcessGroup& g) {
    const int p = g.size(), r = g.rank();
    const int64_t m = 300007;  // elements per block: 1.2 MB of f32
    Tensor t = cpu_tensor(m, DType::kF32);
    fill<float>(t, [&](size_t i) { return r == 1 ? double(i % 1000) : -1.0; });
    g.broadcast(t, 1).wait();
    check<float>(
        t, [&](size_t i) { return double(i % 1000); }, "broadcast from rank 1");
    Tensor all = cpu_tensor(p * m, DType::kF32), mine = cpu_tensor(m, DType::kF32);
    fill<float>(mine, [&](size_t i) { return double(r * 10 + i % 7); });
    g.all_gather(all, mine).wait();
    check<float>(
        all, [&](size_t i) { return double(i / m * 10 + (i % m) % 7); }, "all_gather");
    Tensor block = ops::narrow(all, 0, r * m, m);
    fill<float>(all, [&](size_t i) { return i / m == size_t(r) ? double(r + (i % m) % 5) : -1.0; });
    g.all_gather(all, block).wait();
    check<float>(
        all, [&](size_t i) { return double(i / m + (i % m) % 5); }, "in-place all_gather");
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      fill<float>(all, [&](size_t i) { return input_value(op, r, i); });
      g.reduce_scatter(mine, all, op).wait();
      check<float>(
          mine, [&](size_t i) { return reduced_value(op, p, r * m + i); },
          str_cat("reduce_scatter ", reduce_op_name(op)));
    }
    fill<float>(all, [&](size_t i) { return input_value(ReduceOp::kSum, r, i); });
    g.reduce_scatter(block, all).wait();
    check<float>(
        block, [&](size_t i) { return reduced_value(ReduceOp::kSum, p, r * m + i); },
        "in-place reduce_scatter");
  }));
}
