// The check every kill test makes of the ranks left alive: each exited
// cleanly, its report_outcome() report is a CommError that came well within
// the group's timeout, and its message holds every given piece of text
// (typically the op and sequence number, and the rank that died). And the
// test of a rank that stays alive but never calls a collective.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

namespace spmd::dist::testing {

inline void check_survivors_failed(const std::vector<RankOutcome>& outcomes, int victim,
                                   const std::vector<std::string>& says, long within_ms = 5000) {
  CHECK(outcomes[victim].killed());
  for (int r = 0; r < static_cast<int>(outcomes.size()); ++r) {
    if (r == victim) continue;
    INFO("rank " << r << ": " << outcomes[r].report);
    CHECK(outcomes[r].exited_ok());
    REQUIRE(outcomes[r].report.rfind("comm|", 0) == 0);
    CHECK(reported_ms(outcomes[r].report) < within_ms);
    for (const std::string& text : says) CHECK_THAT(outcomes[r].report, Catch::Contains(text));
  }
}

// A world of `world` ranks over a 1 s timeout in which rank `absent` never
// calls all_reduce #1 (of `elements` floats): it waits 4 s, then leaves.
// Every other rank times out, after the timeout and well before the absent
// rank leaves, naming the op, the group and the absent rank, which it
// learns from the store's arrival records even when it shares no link
// with it.
inline void check_absent_rank_named(int world, int absent, int64_t elements) {
  auto outcomes = run_processes(world, [&](int rank, const std::string& store) {
    auto g = join(rank, world, store, std::chrono::milliseconds(1000));
    g->barrier().wait();
    if (rank == absent) {  // never calls all_reduce #1; waits, then leaves
      std::this_thread::sleep_for(std::chrono::milliseconds(4000));
      return;
    }
    Tensor t = floats(elements, 1.f);
    report_outcome([&] { g->all_reduce(t).wait(); });
  });
  const std::string never = "never arrived at all_reduce #1: [" + std::to_string(absent) + "]";
  for (int r = 0; r < world; ++r) {
    if (r == absent) continue;
    INFO("rank " << r << ": " << outcomes[r].report);
    CHECK(outcomes[r].exited_ok());
    REQUIRE(outcomes[r].report.rfind("timeout|", 0) == 0);
    const long ms = reported_ms(outcomes[r].report);
    CHECK(ms >= 1000);
    CHECK(ms < 3500);  // the timeout, a grace for late arrival records, and slack for load
    CHECK_THAT(outcomes[r].report,
               Catch::Contains("all_reduce #1 in group world") && Catch::Contains(never));
  }
}

}  // namespace spmd::dist::testing
