// The check every kill test makes of the ranks left alive: each exited
// cleanly, its report_outcome() report is a CommError that came well within
// the group's timeout, and its message holds every given piece of text
// (typically the op and sequence number, and the rank that died).
#pragma once

#include <catch2/catch.hpp>
#include <string>
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

}  // namespace spmd::dist::testing
