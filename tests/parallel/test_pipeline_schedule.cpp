// Pipeline schedules, checked without any communication: GPipe and 1F1B for
// every p in 1..8 and m in 1..16 against the bubble theory gives and the
// in-flight bound each promises; a 2-stage, 3-microbatch case against lists
// and a timeline worked out by hand; and the simulator catching each kind of
// broken schedule (backward before forward, missing, wrong rank, deadlock).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>

#include "parallel/pipeline/schedule.h"
#include "runtime/error.h"

using namespace spmd;
using namespace spmd::dist::pp;

namespace {

Action F(int microbatch, int stage) { return {Action::Type::kForward, stage, microbatch}; }
Action B(int microbatch, int stage) { return {Action::Type::kBackward, stage, microbatch}; }

}  // namespace

TEST_CASE("an action names its type, microbatch and stage", "[pipeline]") {
  CHECK(F(3, 1).str() == "F3s1");
  CHECK(B(0, 0).str() == "B0s0");
}

TEST_CASE("GPipe and 1F1B: bubble (p-1)/(m+p-1), 2m actions a rank, in-flight bounds",
          "[pipeline]") {
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B}) {
    for (int p = 1; p <= 8; ++p) {
      for (int m = 1; m <= 16; ++m) {
        INFO(schedule_name(kind) << " p=" << p << " m=" << m);
        const Schedule schedule = make_schedule(kind, p, m);
        REQUIRE(schedule.size() == size_t(p));
        for (const auto& list : schedule) CHECK(list.size() == size_t(2 * m));
        const SimulationResult result = simulate(schedule, p, m);
        REQUIRE(result.ok);
        CHECK(result.error.empty());
        CHECK(result.steps ==
              2 * (m + p - 1));  // m forwards and m backwards, p-1 to fill, p-1 to drain
        CHECK(std::abs(result.bubble - predicted_bubble(p, m)) < 1e-12);
        REQUIRE(result.peak_in_flight.size() == size_t(p));
        for (int r = 0; r < p; ++r) {
          INFO("rank " << r);
          if (kind == ScheduleKind::kGPipe) {
            CHECK(result.peak_in_flight[r] == m);  // every forward before any backward
          } else {
            CHECK(result.peak_in_flight[r] <= std::min(p - r, m));
            CHECK(result.peak_in_flight[r] == std::min(p - r, m));
          }
        }
      }
    }
  }
}

TEST_CASE("the bubble theory gives, worked by hand", "[pipeline]") {
  CHECK(predicted_bubble(1, 5) == 0.0);
  CHECK(predicted_bubble(2, 3) == 0.25);  // 1 / 4
  CHECK(predicted_bubble(4, 8) == 3.0 / 11);
}

TEST_CASE("GPipe on 2 stages, 3 microbatches, by hand", "[pipeline]") {
  const Schedule expected{{F(0, 0), F(1, 0), F(2, 0), B(2, 0), B(1, 0), B(0, 0)},
                          {F(0, 1), F(1, 1), F(2, 1), B(2, 1), B(1, 1), B(0, 1)}};
  const Schedule schedule = make_schedule(ScheduleKind::kGPipe, 2, 3);
  CHECK(schedule == expected);
  // Rank 1 starts one step late; rank 0 waits two steps for B2's gradient.
  CHECK(to_table(schedule, 2, 3) ==
        "rank 0: F0 F1 F2 .  .  B2 B1 B0\n"
        "rank 1: .  F0 F1 F2 B2 B1 B0 .\n");
  const SimulationResult result = simulate(schedule, 2, 3);
  CHECK(result.steps == 8);
  CHECK(result.bubble == 0.25);  // 4 idle cells of 16
  CHECK(result.peak_in_flight == std::vector<int>{3, 3});
}

TEST_CASE("1F1B on 2 stages, 3 microbatches, by hand", "[pipeline]") {
  // Rank 0 warms up with p - 0 - 1 = 1 forward; rank 1, the last, with none.
  const Schedule expected{{F(0, 0), F(1, 0), B(0, 0), F(2, 0), B(1, 0), B(2, 0)},
                          {F(0, 1), B(0, 1), F(1, 1), B(1, 1), F(2, 1), B(2, 1)}};
  const Schedule schedule = make_schedule(ScheduleKind::k1F1B, 2, 3);
  CHECK(schedule == expected);
  CHECK(to_table(schedule, 2, 3) ==
        "rank 0: F0 F1 .  B0 F2 B1 .  B2\n"
        "rank 1: .  F0 B0 F1 B1 F2 B2 .\n");
  const SimulationResult result = simulate(schedule, 2, 3);
  CHECK(result.steps == 8);
  CHECK(result.bubble == 0.25);
  CHECK(result.peak_in_flight == std::vector<int>{2, 1});  // GPipe holds 3 on each
}

TEST_CASE("the table's rows line up with more than ten ranks", "[pipeline]") {
  const std::string table = to_table(make_schedule(ScheduleKind::kGPipe, 11, 1), 11, 1);
  CHECK(table.find("rank  0: F0 .  .") != std::string::npos);
  CHECK(table.find("rank  9: .  .  .  .  .  .  .  .  .  F0 .  .  B0 .") != std::string::npos);
  CHECK(table.find("rank 10: .  .  .  .  .  .  .  .  .  .  F0 B0 .") != std::string::npos);
}

TEST_CASE("the simulator catches broken schedules, naming the rank and action", "[pipeline]") {
  const Schedule good = make_schedule(ScheduleKind::kGPipe, 2, 3);

  SECTION("a backward before its forward") {
    Schedule s = good;
    std::swap(s[1][2], s[1][3]);  // rank 1: F0 F1 B2 F2 ...
    const SimulationResult r = simulate(s, 2, 3);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error, Catch::Contains("rank 1 runs B2s1 (position 2) before its forward F2s1"));
  }
  SECTION("a missing action") {
    Schedule s = good;
    s[0].pop_back();  // B0s0
    const SimulationResult r = simulate(s, 2, 3);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error, Catch::Contains("B0s0 is missing (it belongs on rank 0)"));
  }
  SECTION("an action on the wrong rank") {
    Schedule s = good;
    s[0].push_back(s[1].back());  // B0s1 onto rank 0 as well
    s[1].pop_back();
    const SimulationResult r = simulate(s, 2, 3);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error, Catch::Contains("rank 0 holds B0s1, but stage 1 lives on rank 1"));
  }
  SECTION("an action twice") {
    Schedule s = good;
    s[1].push_back(F(1, 1));
    const SimulationResult r = simulate(s, 2, 3);
    CHECK_FALSE(r.ok);
    CHECK_THAT(r.error, Catch::Contains("rank 1 holds F1s1 twice"));
  }
  SECTION("an action out of range") {
    Schedule s = good;
    s[0][0] = F(3, 0);
    CHECK_THAT(
        simulate(s, 2, 3).error,
        Catch::Contains("rank 0 holds F3s0, out of range: stages are 0..1, microbatches 0..2"));
    s[0][0] = F(0, 2);
    CHECK_THAT(simulate(s, 2, 3).error, Catch::Contains("rank 0 holds F0s2, out of range"));
  }
  SECTION("a deadlock") {
    // Rank 0 forwards microbatch 0, then waits for its gradient before it
    // forwards microbatch 1; rank 1 wants microbatch 1 first. Each rank's
    // list is complete and in order, yet neither can move after step 0.
    const Schedule s{{F(0, 0), B(0, 0), F(1, 0), B(1, 0)}, {F(1, 1), B(1, 1), F(0, 1), B(0, 1)}};
    const SimulationResult r = simulate(s, 2, 2);
    CHECK_FALSE(r.ok);
    CHECK(r.steps == 1);
    CHECK(r.error ==
          "deadlock: rank 0 waits at B0s0 for B0s1 from rank 1; "
          "rank 1 waits at F1s1 for F1s0 from rank 0");
    CHECK_THROWS_AS(to_table(s, 2, 2), InvalidArgument);
    CHECK_THROWS_WITH(to_table(s, 2, 2), Catch::Contains("to_table: the schedule does not run: "
                                                         "deadlock: rank 0 waits at B0s0"));
  }
  SECTION("arguments that describe no pipeline") {
    CHECK_THAT(simulate({}, 2, 3).error, Catch::Contains("the schedule has no ranks"));
    CHECK_THAT(simulate(good, 0, 3).error, Catch::Contains("num_stages must be >= 1, got 0"));
    CHECK_THAT(simulate(good, 2, 0).error, Catch::Contains("num_microbatches must be >= 1, got 0"));
  }
}

TEST_CASE("bad arguments and unknown names are refused, naming them", "[pipeline]") {
  CHECK_THROWS_AS(make_schedule(ScheduleKind::kGPipe, 0, 4), InvalidArgument);
  CHECK_THROWS_WITH(make_schedule(ScheduleKind::kGPipe, 0, 4),
                    Catch::Contains("make_schedule(gpipe): num_ranks must be >= 1, got 0"));
  CHECK_THROWS_WITH(make_schedule(ScheduleKind::k1F1B, 4, -2),
                    Catch::Contains("make_schedule(1f1b): num_microbatches must be >= 1, got -2"));
  CHECK(parse_schedule("gpipe") == ScheduleKind::kGPipe);
  CHECK(parse_schedule("1f1b") == ScheduleKind::k1F1B);
  CHECK(std::string(schedule_name(ScheduleKind::k1F1B)) == "1f1b");
  CHECK_THROWS_AS(parse_schedule("zb"), InvalidArgument);
  CHECK_THROWS_WITH(parse_schedule("zb"),
                    Catch::Contains("unknown schedule \"zb\"") && Catch::Contains("gpipe, 1f1b"));
}
