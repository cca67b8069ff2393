// The ledger's record path, which runs on every collective: fingerprints
// that tell apart calls differing in any compared field, snapshots taken by
// another thread while the issuing thread records (no lock between them)
// that are whole, and the completion marks that the progress record counts.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <set>
#include <thread>

#include "parallel/comm/desync_check.h"
#include "parallel/comm/ledger.h"
#include "parallel/comm/process_group.h"
#include "runtime/error.h"
#include "runtime/hash_store.h"
#include "tensor/factory.h"

using namespace spmd;
using namespace spmd::dist;

namespace {

LedgerEntry call(OpType op, std::vector<int64_t> shape, std::string_view tag = "") {
  LedgerEntry e;
  e.op = op;
  e.ndim = int32_t(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) e.dims[i] = shape[i];
  e.set_tag(tag);
  return e;
}

// Entry #s of the concurrent test: its fields are worked out from s alone.
LedgerEntry numbered(uint64_t s) {
  LedgerEntry e = call(OpType::kAllReduce, {int64_t(s % 7) + 1, int64_t(s)},
                       s % 5 == 0 ? "tag" + std::to_string(s % 3) : "");
  e.seq = s;
  e.issued_us = int64_t(s);
  return e;
}

// The progress record published under g/progress/0, once it reports
// `issued` collectives of which `completed` done (or the last one seen
// after 5 s).
RankProgress progress_of(Store& store, uint64_t issued, uint64_t completed) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  RankProgress last;
  while (std::chrono::steady_clock::now() < deadline) {
    if (store.check({progress_key("g", 0)})) {
      auto p = decode_progress(store.get_string(progress_key("g", 0)));
      REQUIRE(p);
      last = *p;
      if (p->issued == issued && p->completed == completed) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return last;
}

}  // namespace

TEST_CASE("ledger record: calls that differ in one compared field differ in fingerprint",
          "[comm][desync]") {
  std::vector<LedgerEntry> calls = {
      call(OpType::kAllReduce, {6}),      call(OpType::kAllReduce, {2, 3}),
      call(OpType::kAllReduce, {3, 2}),   call(OpType::kAllReduce, {6, 1}),
      call(OpType::kAllReduce, {6}, "a"), call(OpType::kAllReduce, {6}, "b"),
      call(OpType::kAllGather, {6}),      call(OpType::kBarrier, {}),
      call(OpType::kAllReduce, {0}),      call(OpType::kAllReduce, {}),
  };
  calls.push_back(calls[0]), calls.back().reduce_op = ReduceOp::kMax;
  calls.push_back(calls[0]), calls.back().dtype = DType::kF64;
  calls.push_back(call(OpType::kBroadcast, {6})), calls.back().root = 0;
  calls.push_back(call(OpType::kBroadcast, {6})), calls.back().root = 1;
  std::set<uint64_t> fingerprints;
  for (const LedgerEntry& e : calls) fingerprints.insert(e.fingerprint());
  CHECK(fingerprints.size() == calls.size());
  // What is not compared does not count: the sequence number, the time.
  LedgerEntry later = calls[1];
  later.seq = 99, later.issued_us = 12345;
  CHECK(later.fingerprint() == calls[1].fingerprint());
  // The rolling hash depends on the order of the calls, not only on the set.
  auto hash_of = [](const std::vector<LedgerEntry>& in) {
    Ledger ledger;
    for (size_t s = 0; s < in.size(); ++s) {
      LedgerEntry e = in[s];
      e.seq = s;
      ledger.record(e);
    }
    return ledger.snapshot(0).hash;
  };
  CHECK(hash_of({calls[0], calls[1]}) == hash_of({calls[0], calls[1]}));
  CHECK(hash_of({calls[0], calls[1]}) != hash_of({calls[1], calls[0]}));
  CHECK(hash_of({calls[4]}) != hash_of({calls[5]}));
}

TEST_CASE("ledger record: a snapshot taken while another thread records is whole",
          "[comm][desync]") {
  const uint64_t n = 1000000;
  std::vector<uint64_t> hash_after(n);  // the hash after #s, recorded by one thread alone
  {
    Ledger reference;
    for (uint64_t s = 0; s < n; ++s) {
      reference.record(numbered(s));
      hash_after[s] = reference.snapshot(0).hash;
    }
  }
  // What is wrong with a snapshot ("" when it is whole): checked after the
  // writer has been joined, so that a failure reports rather than aborts.
  auto wrong = [&](const LedgerRecord& r) -> std::string {
    if (r.entries.empty() || r.entries.size() > Ledger::kKept) {
      return str_cat(r.entries.size(), " entries at count ", r.count);
    }
    if (r.hash != hash_after[r.count - 1]) return str_cat("the hash at count ", r.count);
    for (size_t i = 0; i < r.entries.size(); ++i) {
      const LedgerEntry& e = r.entries[i];
      const uint64_t s = r.count - r.entries.size() + i;
      const LedgerEntry want = numbered(s);
      const bool same = e.seq == s && e.op == want.op && e.ndim == want.ndim &&
                        e.dims[0] == want.dims[0] && e.dims[1] == want.dims[1] &&
                        e.tag_view() == want.tag_view() && e.issued_us == want.issued_us &&
                        e.hash == hash_after[s];
      if (!same) {
        return str_cat("entry #", s, " at count ", r.count, ": ", e.describe(), " #", e.seq,
                       " for ", want.describe());
      }
    }
    return "";
  };
  Ledger ledger;
  std::atomic<bool> reading{false}, done{false};
  std::thread writer([&] {
    while (!reading.load()) std::this_thread::yield();
    for (uint64_t s = 0; s < n; ++s) ledger.record(numbered(s));
    done = true;
  });
  long snapshots = 0, mid_run = 0;
  std::string first_wrong;
  reading = true;
  while (!done.load() && first_wrong.empty()) {
    const LedgerRecord r = ledger.snapshot(3);
    ++snapshots;
    if (r.count == 0) continue;
    if (r.count < n) ++mid_run;
    first_wrong = wrong(r);
  }
  writer.join();
  CHECK(first_wrong == "");
  const LedgerRecord last = ledger.snapshot(3);
  CHECK(last.count == n);
  CHECK(last.entries.size() == Ledger::kKept);
  CHECK(last.hash == hash_after[n - 1]);
  INFO(snapshots << " snapshots, " << mid_run << " while the writer ran");
  CHECK(mid_run > 0);
}

TEST_CASE("desync check: the progress record counts the collectives done in order",
          "[comm][desync]") {
  ::setenv("SPMD_DESYNC_INTERVAL_MS", "10", 1);
  auto store = std::make_shared<HashStore>();
  const auto wall_us = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const int64_t start_us = wall_us();
  DesyncCheck check(store, "g/", "g", 0, 1);
  ::unsetenv("SPMD_DESYNC_INTERVAL_MS");
  CommOp op;
  op.type = OpType::kAllReduce;
  op.tensor = ops::ones({4}, {DType::kF32});
  for (uint64_t s = 0; s < 5; ++s) {
    op.seq = s;
    check.record(op, "");
  }
  for (uint64_t s : {4, 0, 3, 1}) check.completed(s);  // #2 not yet
  RankProgress p = progress_of(*store, 5, 2);
  CHECK(p.issued == 5);
  CHECK(p.completed == 2);
  CHECK(p.seq == 2);
  CHECK(p.op == "all_reduce(f32[4])");
  // The publisher's tick: not before the check began, not after now.
  CHECK(p.since_us >= start_us);
  CHECK(p.since_us <= wall_us());
  check.completed(2);
  // Many more than the completion slots, all done: counted whole.
  for (uint64_t s = 5; s < 1005; ++s) {
    op.seq = s;
    check.record(op, "");
    check.completed(s);
  }
  p = progress_of(*store, 1005, 1005);
  CHECK(p.issued == 1005);
  CHECK(p.completed == 1005);
  CHECK_FALSE(p.in_flight());
}
