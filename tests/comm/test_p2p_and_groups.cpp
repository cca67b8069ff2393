// Point-to-point messages and subgroups, in real processes: send/recv around
// a ring, between random pairs posted in random orders (matching by source
// and tag must untangle them), batched exchanges; new_group and split.
#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "harness.h"
#include "values.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

void fill_i64(const Tensor& t, int64_t base) {
  auto* p = static_cast<int64_t*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = base + i;
}

void check_i64(const Tensor& t, int64_t base, const std::string& what) {
  const auto* p = static_cast<const int64_t*>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    expect(p[i] == base + i, what, ": element ", i, " is ", p[i], ", expected ", base + i);
  }
}

}  // namespace

TEST_CASE("send/recv around a ring, with tags, large and small", "[comm][p2p]") {
  REQUIRE_NOTHROW(run_world(4, [](ProcessGroup& g) {
    const int p = g.size(), r = g.rank();
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(1000), int64_t(1 << 20)}) {
      Tensor out = cpu_tensor(n, DType::kI64), in = cpu_tensor(n, DType::kI64);
      fill_i64(out, r * 1000000);
      // Every rank sends first: with large messages this only works because
      // sends do not wait for the matching recv to be posted.
      Work s = g.send(out, (r + 1) % p, /*tag=*/7);
      Work v = g.recv(in, (r + p - 1) % p, /*tag=*/7);
      v.wait();
      s.wait();
      check_i64(in, (r + p - 1) % p * 1000000, str_cat("ring recv of ", n));
    }
  }));
}

TEST_CASE("send/recv between random pairs, posted in random orders", "[comm][p2p]") {
  REQUIRE_NOTHROW(run_world(4, [](ProcessGroup& g) {
    const int p = g.size(), r = g.rank();
    struct Msg {
      int src, dst, tag;
      int64_t n;
    };
    // Every rank draws the same list of messages...
    std::mt19937 common(1234);
    std::vector<Msg> msgs;
    for (int k = 0; k < 60; ++k) {
      int src = int(common() % p), dst = int(common() % (p - 1));
      if (dst >= src) ++dst;
      msgs.push_back({src, dst, int(common() % 3), int64_t(common() % 5000)});
    }
    // ...then posts its own sends and recvs in an order of its own.
    std::vector<int> order;
    for (int k = 0; k < int(msgs.size()); ++k) {
      if (msgs[k].src == r || msgs[k].dst == r) order.push_back(k);
    }
    std::shuffle(order.begin(), order.end(), std::mt19937(r + 1));
    // Messages of one stream (src, dst, tag) are matched in send order, so
    // within each stream put them back in order, in the slots they drew.
    for (size_t a = 0; a < order.size(); ++a) {
      for (size_t b = a + 1; b < order.size(); ++b) {
        const Msg &x = msgs[order[a]], &y = msgs[order[b]];
        const bool same = x.src == y.src && x.dst == y.dst && x.tag == y.tag;
        if (same && order[a] > order[b]) std::swap(order[a], order[b]);
      }
    }
    std::vector<Tensor> bufs(msgs.size());
    std::vector<Work> works;
    for (int k : order) {
      const Msg& m = msgs[k];
      bufs[k] = cpu_tensor(m.n, DType::kI64);
      if (m.src == r) {
        fill_i64(bufs[k], k * 100000);
        works.push_back(g.send(bufs[k], m.dst, m.tag));
      } else {
        works.push_back(g.recv(bufs[k], m.src, m.tag));
      }
    }
    for (Work& w : works) w.wait();
    for (int k : order) {
      if (msgs[k].dst == r) check_i64(bufs[k], k * 100000, str_cat("message ", k));
    }
  }));
}

TEST_CASE("batch_isend_irecv exchanges both ways at once", "[comm][p2p]") {
  REQUIRE_NOTHROW(run_world(3, [](ProcessGroup& g) {
    const int p = g.size(), r = g.rank();
    Tensor to_next = cpu_tensor(300000, DType::kI64), to_prev = cpu_tensor(300000, DType::kI64);
    Tensor from_prev = cpu_tensor(300000, DType::kI64), from_next = cpu_tensor(300000, DType::kI64);
    fill_i64(to_next, r * 10);
    fill_i64(to_prev, r * 10 + 5);
    g.batch_isend_irecv({{OpType::kSend, to_next, (r + 1) % p, 0},
                         {OpType::kSend, to_prev, (r + p - 1) % p, 0},
                         {OpType::kRecv, from_prev, (r + p - 1) % p, 0},
                         {OpType::kRecv, from_next, (r + 1) % p, 0}})
        .wait();
    check_i64(from_prev, (r + p - 1) % p * 10, "from the previous rank");
    check_i64(from_next, (r + 1) % p * 10 + 5, "from the next rank");
  }));
}

// Rank 0 issues an all_reduce, does not wait on it, and blocks on a message
// that rank 1 sends only once the all_reduce is done: valid (collectives run
// by themselves, as in NCCL), and a deadlock if a collective ran only when
// waited on. The group's worker starts it.
// 1000 elements go around the rings; 100 (800 bytes) through the group
// segment's posts, which rank 0's issuing thread posts and leaves for the
// worker to finish (segment_small_all_reduce.h): neither may block the recv.
TEST_CASE("a collective nobody waits on runs by itself", "[comm][p2p]") {
  for (const int64_t n : {1000, 100}) {
    INFO(n << " elements");
    REQUIRE_NOTHROW(run_world(2, [n](ProcessGroup& g) {
      Tensor t = cpu_tensor(n, DType::kI64), msg = cpu_tensor(10, DType::kI64);
      fill_i64(t, 1);
      if (g.rank() == 0) {
        Work reduce = g.all_reduce(t);
        g.recv(msg, 1).wait();
        check_i64(msg, 42, "the message sent after the all_reduce");
        reduce.wait();
      } else {
        g.all_reduce(t).wait();
        fill_i64(msg, 42);
        g.send(msg, 0).wait();
      }
      const auto* sum = static_cast<const int64_t*>(t.raw_data());
      for (int64_t i = 0; i < t.numel(); ++i) {
        expect(sum[i] == 2 * (1 + i), "all_reduce element ", i, " is ",
               sum[i]);  // 1 + i on 2 ranks
      }
    }));
  }
}

// Rank 0 sends more than the sockets can hold and, without waiting on the
// send, enters a barrier that rank 1 reaches only once the whole message has
// arrived: the send must move on with no thread waiting on it (the engine's
// thread takes it over), else this deadlocks.
TEST_CASE("a send nobody waits on is delivered by itself", "[comm][p2p]") {
  REQUIRE_NOTHROW(run_world(2, [](ProcessGroup& g) {
    Tensor msg = cpu_tensor(int64_t(4) << 20, DType::kI64);  // 32 MiB
    if (g.rank() == 0) {
      fill_i64(msg, 7);
      Work send = g.send(msg, 1);
      g.barrier().wait();
      send.wait();
    } else {
      g.recv(msg, 0).wait();
      check_i64(msg, 7, "the 32 MiB message");
      g.barrier().wait();
    }
  }));
}

TEST_CASE("new_group: members reduce among themselves, the others get none", "[comm][groups]") {
  REQUIRE_NOTHROW(run_world(4, [](ProcessGroup& world) {
    const int r = world.rank();
    auto evens = world.new_group({2, 0});  // listed in any order; ranks are sorted
    auto all = world.new_group({0, 1, 2, 3});
    expect((evens != nullptr) == (r % 2 == 0), "rank ", r, ": membership of {0, 2} is wrong");
    if (evens) {
      expect(evens->size() == 2 && evens->rank() == r / 2, "rank ", r, ": sub-rank ", evens->rank(),
             " of ", evens->size());
      Tensor t = cpu_tensor(1000, DType::kF32);
      auto* x = static_cast<float*>(t.raw_data());
      std::fill(x, x + 1000, float(r));
      evens->all_reduce(t).wait();
      expect(x[0] == 2.f && x[999] == 2.f, "sum over ranks 0 and 2 is ", x[0]);
    }
    Tensor one = cpu_tensor(1, DType::kI32);
    *static_cast<int32_t*>(one.raw_data()) = r;
    all->all_reduce(one).wait();
    expect(*static_cast<int32_t*>(one.raw_data()) == 6, "second subgroup: sum of ranks");
  }));
}

TEST_CASE("split: same color, one group, ordered by key; a negative color, none",
          "[comm][groups]") {
  REQUIRE_NOTHROW(run_world(5, [](ProcessGroup& world) {
    const int r = world.rank();
    // Colors by parity, rank 4 opts out; key -r reverses the order.
    auto half = world.split(r == 4 ? -1 : r % 2, -r);
    expect((half == nullptr) == (r == 4), "rank ", r, ": split membership");
    if (!half) return;
    const std::vector<int> members = r % 2 == 0 ? std::vector<int>{2, 0} : std::vector<int>{3, 1};
    expect(half->size() == 2 && members[half->rank()] == r, "rank ", r, " got sub-rank ",
           half->rank());
    expect(half->global_rank(half->rank()) == r, "global_rank maps back");
    Tensor ranks = cpu_tensor(2, DType::kI64), mine = cpu_tensor(1, DType::kI64);
    *static_cast<int64_t*>(mine.raw_data()) = r;
    half->all_gather(ranks, mine).wait();
    const auto* got = static_cast<const int64_t*>(ranks.raw_data());
    expect(got[0] == members[0] && got[1] == members[1], "rank ", r, ": gathered ", got[0], ", ",
           got[1]);
  }));
}
