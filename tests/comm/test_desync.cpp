// The fingerprint ledger: its comparison on records worked out by hand, and
// real processes that call different collectives (a rank that skips one, one
// that calls another op, one that passes another shape), whose errors must
// name the culprit rank, its call, the sequence number and what the others
// called.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "harness.h"
#include "parallel/comm/init.h"
#include "parallel/comm/ledger.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

namespace {

LedgerEntry call(uint64_t seq, OpType op, std::vector<int64_t> shape, int root = -1) {
  LedgerEntry e;
  e.seq = seq;
  e.op = op;
  e.ndim = op == OpType::kBarrier ? -1 : int32_t(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) e.dims[i] = shape[i];
  e.root = root;
  return e;
}

// A rank's record after issuing `calls` in order.
LedgerRecord record_of(int rank, const std::vector<LedgerEntry>& calls) {
  Ledger ledger;
  for (const LedgerEntry& e : calls) ledger.record(e);
  return ledger.snapshot(rank);
}

// Waits on `w`; reports the error's text (or "ok").
void report_error(const Work& w) {
  try {
    w.wait();
    report("ok");
  } catch (const Error& e) {
    report(e.what());
  }
}

}  // namespace

TEST_CASE("ledger: the first differing call is named with its rank and seq", "[comm][desync]") {
  const LedgerEntry b = call(0, OpType::kBarrier, {});
  std::vector<std::optional<LedgerRecord>> records;
  for (int r = 0; r < 4; ++r) {
    LedgerEntry second =
        r == 3 ? call(1, OpType::kAllGather, {1024}) : call(1, OpType::kAllReduce, {4096});
    records.push_back(record_of(r, {b, second}));
  }
  CHECK(find_desync(records, "tp") ==
        "rank 3 called all_gather(f32[1024]) as collective #1 of group tp, ranks 0-2 called "
        "all_reduce(f32[4096])");
}

TEST_CASE("ledger: a rank behind is named at the first call it lacks", "[comm][desync]") {
  const LedgerEntry b = call(0, OpType::kBarrier, {});
  const LedgerEntry ar = call(1, OpType::kAllReduce, {2, 3});
  std::vector<std::optional<LedgerRecord>> records = {record_of(0, {b, ar}), record_of(1, {b}),
                                                      record_of(2, {b, ar})};
  CHECK(find_desync(records, "world") ==
        "rank 1 has not called collective #1 of group world (its last: #0 barrier()), ranks 0, 2 "
        "called all_reduce(f32[2,3])");
  records[1] = record_of(1, {b, ar});  // caught up: they agree
  CHECK_FALSE(find_desync(records, "world"));
  records[2].reset();  // an unpublished rank is not compared
  CHECK_FALSE(find_desync(records, "world"));
}

TEST_CASE("ledger: roots, reduce ops and call-site tags count", "[comm][desync]") {
  LedgerEntry x = call(0, OpType::kBroadcast, {8}, 0), y = call(0, OpType::kBroadcast, {8}, 1);
  CHECK(find_desync({record_of(0, {x}), record_of(1, {y})}, "g") ==
        "rank 1 called broadcast(f32[8], root 1) as collective #0 of group g, rank 0 called "
        "broadcast(f32[8], root 0)");
  LedgerEntry s = call(0, OpType::kAllReduce, {2}), m = s;
  m.reduce_op = ReduceOp::kMax;
  m.set_tag("loss norm");
  CHECK(m.describe() == "all_reduce(f32[2], max) at loss_norm");
  CHECK(find_desync({record_of(0, {s}), record_of(1, {s}), record_of(2, {m})}, "g").has_value());
}

TEST_CASE("ledger: a difference older than the kept entries is still caught", "[comm][desync]") {
  std::vector<LedgerEntry> a, b;
  for (uint64_t s = 0; s < 40; ++s) {
    a.push_back(call(s, OpType::kAllReduce, {4}));
    b.push_back(call(s, OpType::kAllReduce, {s == 3 ? 5 : 4}));
  }
  auto found = find_desync({record_of(0, a), record_of(1, b)}, "g");
  REQUIRE(found);
  CHECK_THAT(*found, Catch::Contains("rank 1 issued different collectives from rank 0") &&
                         Catch::Contains("before #24"));
}

TEST_CASE("ledger: the text form round-trips and rejects garbage", "[comm][desync]") {
  std::vector<LedgerEntry> calls;
  for (uint64_t s = 0; s < 20; ++s) calls.push_back(call(s, OpType::kAllGather, {3, int64_t(s)}));
  calls[19].set_tag("fsdp.unit2");
  LedgerRecord r = record_of(5, calls);
  r.final = true;
  auto back = decode(encode(r));
  REQUIRE(back);
  CHECK(back->rank == 5);
  CHECK(back->count == 20);
  CHECK(back->hash == r.hash);
  CHECK(back->final);
  REQUIRE(back->entries.size() == Ledger::kKept);
  CHECK(back->entries.back().describe() == "all_gather(f32[3,19]) at fsdp.unit2");
  CHECK(back->entries.front().hash == r.entries.front().hash);
  CHECK_FALSE(decode(""));
  CHECK_FALSE(decode("spmd-ledger 1 0 3 7 0\n0 1 99 0 0 -1 -1 -\n"));  // no op 99
  CHECK_FALSE(decode("spmd-ledger 1 0 3 7 0\n5 1 2 0 0 -1 1\n"));      // cut short
  CHECK(rank_list({4, 0, 1, 2, 6}) == "ranks 0-2, 4, 6");
  CHECK(rank_list({1, 2}) == "ranks 1, 2");
}

TEST_CASE("desync across processes: the error names the culprit, its call and the seq",
          "[comm][desync]") {
  struct Case {
    const char* name;
    int culprit;
    std::function<Work(ProcessGroup&, int rank)> call;  // collective #1
    const char* says;
  };
  const Case cases[] = {
      {"skipped", 1,
       [](ProcessGroup& g, int r) {
         if (r == 1) {  // skips all_reduce #1: busy in its own code, then leaves
           std::this_thread::sleep_for(std::chrono::milliseconds(2500));
           return Work();
         }
         return g.all_reduce(floats(1000));
       },
       "rank 1 has not called collective #1 of group world (its last: #0 barrier()), ranks 0, 2 "
       "called all_reduce(f32[1000])"},
      {"other op", 1,
       [](ProcessGroup& g, int r) {
         if (r == 1) return g.all_gather(floats(3 * 1024), floats(1024));
         return g.all_reduce(floats(4096));
       },
       "rank 1 called all_gather(f32[1024]) as collective #1 of group world, ranks 0, 2 called "
       "all_reduce(f32[4096])"},
      {"other shape", 2,
       [](ProcessGroup& g, int r) { return g.all_reduce(floats(r == 2 ? 999 : 1000)); },
       "rank 2 called all_reduce(f32[999]) as collective #1 of group world, ranks 0, 1 called "
       "all_reduce(f32[1000])"},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      const int world = 3;
      auto outcomes = run_processes(world, [&](int rank, const std::string& store) {
        auto g = join(rank, world, store, std::chrono::milliseconds(1000));
        g->barrier().wait();
        report_error(c.call(*g, rank));
      });
      for (int r = 0; r < world; ++r) {
        INFO("rank " << r << ": " << outcomes[r].report);
        CHECK(outcomes[r].exited_ok());  // every process ends
        if (r == c.culprit && std::string(c.name) == "skipped") continue;
        CHECK_THAT(outcomes[r].report, Catch::Contains(c.says));
      }
    }
  }
}

TEST_CASE("desync while running: the same op and shape from different call sites is reported",
          "[comm][desync]") {
  const int world = 3;
  auto outcomes = run_processes(world, [&](int rank, const std::string& store) {
    ::setenv("SPMD_DESYNC_INTERVAL_MS", "50", 1);
    auto g = join(rank, world, store, std::chrono::seconds(5));
    auto sub = g->new_group({0, 2});  // ranks 0, 2 of world: ranks 0, 1 of world/group0
    if (sub) {
      sub->set_call_site(rank == 2 ? "grad_norm" : "loss");  // the wire sees two equal calls
      sub->all_reduce(floats(4)).wait();
      sub->set_call_site("");
      sub->barrier().wait();
    }
    g->barrier().wait();
    if (rank == 0) {  // rank 0 of the subgroup compares about every 5 intervals
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      while (!g->store_ptr()->check({"world/group0/desync"}) &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      report(g->store_ptr()->check({"world/group0/desync"})
                 ? g->store_ptr()->get_string("world/group0/desync")
                 : "no desync reported");
    }
    g->barrier().wait();
  });
  for (int r = 0; r < world; ++r) CHECK(outcomes[r].exited_ok());
  CHECK(outcomes[0].report ==
        "desync: rank 1 called all_reduce(f32[4]) at grad_norm as collective #0 of group "
        "world/group0, rank 0 called all_reduce(f32[4]) at loss");
}
