// The flight recorder: the ring keeps the last operations in order with how
// each ended, and a rank killed in the middle of a collective leaves, from
// every surviving rank, a JSON dump of its last operations in the order it
// issued them, the interrupted one marked failed.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "harness.h"
#include "parallel/comm/flight_recorder.h"
#include "parallel/comm/init.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;
namespace fs = std::filesystem;

namespace {

CommOp op_of(OpType type, uint64_t seq) {
  CommOp op;
  op.type = type;
  op.seq = seq;
  return op;
}

}  // namespace

TEST_CASE("flight recorder: the last N operations, oldest first, with their ends",
          "[comm][flight]") {
  FlightRecorder rec(3);
  std::vector<uint64_t> ids;
  for (uint64_t s = 0; s < 5; ++s) ids.push_back(rec.issued(op_of(OpType::kAllReduce, s)));
  rec.ended(ids[0], true);  // left the ring: ignored
  rec.ended(ids[3], true);
  rec.ended(ids[4], false);
  rec.ended(ids[4], true);  // the first end wins
  const auto kept = rec.snapshot();
  REQUIRE(kept.size() == 3);
  CHECK(kept[0].seq == 2);
  CHECK(kept[0].state == FlightEntry::State::kPending);
  CHECK(kept[1].state == FlightEntry::State::kCompleted);
  CHECK(kept[2].state == FlightEntry::State::kFailed);
  CHECK(kept[1].ended_us >= kept[1].issued_us);
  const auto doc = nlohmann::json::parse(rec.to_json(7, "world/tp", 1, 2, "why", 2));
  CHECK(doc["rank"] == 7);
  CHECK(doc["group"] == "world/tp");
  CHECK(doc["ops"][0]["state"] == "failed");  // #2 is the failing collective
  CHECK(doc["ops"][0]["op"] == "all_reduce");
}

TEST_CASE("flight recorder: times on the wall clock, an op's issue time taken from the op",
          "[comm][flight]") {
  // The ring keeps the steady clock's times; a snapshot puts them on the
  // wall clock (the dumps of several nodes are laid side by side).
  auto wall_us = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  FlightRecorder rec(4);
  const int64_t before = wall_us();
  const uint64_t now_id = rec.issued(op_of(OpType::kAllReduce, 0));
  CommOp earlier = op_of(OpType::kAllReduce, 1);
  earlier.issued_at = std::chrono::steady_clock::now() - std::chrono::seconds(10);
  rec.issued(earlier);
  rec.ended(now_id, true);
  const int64_t after = wall_us();
  const auto kept = rec.snapshot();
  REQUIRE(kept.size() == 2);
  CHECK(kept[0].issued_us >= before - 1000);  // within the clocks' rounding and a step
  CHECK(kept[0].issued_us <= after + 1000);
  CHECK(kept[0].ended_us >= kept[0].issued_us);
  CHECK(kept[0].ended_us <= after + 1000);
  CHECK(kept[1].issued_us >= before - 10'001'000);  // the op's own time, 10 s ago
  CHECK(kept[1].issued_us <= after - 9'999'000);
  CHECK(kept[1].ended_us == 0);  // pending
}

TEST_CASE("flight recorder: a collective ended by its sequence number", "[comm][flight]") {
  FlightRecorder rec(3);
  rec.issued(op_of(OpType::kAllReduce, 0));
  rec.issued(op_of(OpType::kSend, 1));  // a send's own count 1, not collective #1
  rec.issued(op_of(OpType::kBarrier, 1));
  rec.issued(op_of(OpType::kAllReduce, 2));
  rec.ended_collective(0, true);  // left the ring: ignored
  rec.ended_collective(1, false);
  rec.ended_collective(2, true);
  rec.ended_collective(2, false);  // the first end wins
  const auto kept = rec.snapshot();
  REQUIRE(kept.size() == 3);
  CHECK(kept[0].op == OpType::kSend);
  CHECK(kept[0].state == FlightEntry::State::kPending);
  CHECK(kept[1].op == OpType::kBarrier);
  CHECK(kept[1].state == FlightEntry::State::kFailed);
  CHECK(kept[2].state == FlightEntry::State::kCompleted);
  CHECK(kept[2].ended_us >= kept[2].issued_us);
}

TEST_CASE("flight recorder: a send's peer and a broadcast's root are recorded apart",
          "[comm][flight]") {
  FlightRecorder rec(4);
  CommOp send = op_of(OpType::kSend, 0), bcast = op_of(OpType::kBroadcast, 0);
  send.peer = 2;
  bcast.root = 1;
  rec.issued(send);
  rec.issued(bcast);
  const auto doc = nlohmann::json::parse(rec.to_json(0, "world", 0, 3, "why", -1));
  CHECK(doc["ops"][0]["peer"] == 2);
  CHECK(doc["ops"][0]["root"] == -1);
  CHECK(doc["ops"][1]["peer"] == -1);
  CHECK(doc["ops"][1]["root"] == 1);
}

TEST_CASE("flight recorder: a rank killed mid-collective leaves the survivors' last ops in order",
          "[comm][flight][failure]") {
  const int world = 3, victim = 1;
  char tmpl[] = "/tmp/spmd_flight_XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  auto outcomes = run_processes(world, [&](int rank, const std::string& store) {
    ::setenv("SPMD_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
    InitOptions init;
    init.init_method = "file://" + store;
    init.rank = rank;
    init.world_size = world;
    init.timeout = std::chrono::seconds(10);
    auto g = init_process_group(init);
    g->barrier().wait();                 // #0
    g->all_reduce(floats(100)).wait();   // #1
    g->broadcast(floats(10), 0).wait();  // #2
    // #3: 32 MiB, at least 1.6 ms of copying at 20 GB/s, and the victim dies
    // as soon as it has issued it (a pause first let zero copy finish it).
    Work w = g->all_reduce(floats(8 << 20));
    if (rank == victim) ::kill(::getpid(), SIGKILL);
    try {
      w.wait();
      report("ok");
    } catch (const Error& e) {
      report(e.what());
    }
  });
  CHECK(outcomes[victim].killed());
  for (int r = 0; r < world; ++r) {
    if (r == victim) continue;
    INFO("rank " << r << ": " << outcomes[r].report);
    CHECK(outcomes[r].exited_ok());
    const fs::path file = fs::path(dir) / ("flight_rank" + std::to_string(r) + "_world.json");
    REQUIRE(fs::exists(file));
    std::ifstream in(file);
    const auto doc = nlohmann::json::parse(in);
    CHECK(doc["rank"] == r);
    CHECK_THAT(doc["reason"].get<std::string>(), Catch::Contains("all_reduce #3 in group world"));
    const auto& ops = doc["ops"];
    REQUIRE(ops.size() == 4);
    const char* names[] = {"barrier", "all_reduce", "broadcast", "all_reduce"};
    for (int i = 0; i < 4; ++i) {
      CHECK(ops[i]["id"] == i);
      CHECK(ops[i]["seq"] == i);
      CHECK(ops[i]["op"] == names[i]);
      CHECK(ops[i]["state"] == (i < 3 ? "completed" : "failed"));
      if (i) CHECK(ops[i]["issued_us"] >= ops[i - 1]["issued_us"]);
    }
    CHECK(ops[3]["bytes"] == (8 << 20) * 4);
  }
  fs::remove_all(dir);
}
