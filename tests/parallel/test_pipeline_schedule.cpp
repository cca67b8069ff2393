// Pipeline schedules, checked without any communication: GPipe, 1F1B,
// interleaved 1F1B and ZB-H1 for every p in 1..8 and m in 1..16 against the
// bubble theory gives and the in-flight bound each promises; small cases
// against lists and timelines worked out by hand; and the simulator
// catching each kind of broken schedule (backward before forward, W before
// B, missing, wrong rank, deadlock).
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
Action W(int microbatch, int stage) { return {Action::Type::kWeight, stage, microbatch}; }

// Every action of the step once: F and B (and W when split) of each stage
// and microbatch. (simulate() checks it too; this counts independently.)
void check_complete(const Schedule& s, int stages, int m, bool split) {
  size_t total = 0;
  for (const auto& list : s) total += list.size();
  CHECK(total == size_t((split ? 3 : 2) * stages * m));
}

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

TEST_CASE("interleaved 1F1B: bubble (p-1)/(vm+p-1), warm-up + 1 in flight", "[pipeline]") {
  for (int v : {2, 3}) {
    for (int p = 1; p <= 8; ++p) {
      for (int m = p; m <= 16; m += p) {
        INFO("interleaved v=" << v << " p=" << p << " m=" << m);
        const Schedule s = make_schedule(ScheduleKind::kInterleaved1F1B, p, m, v);
        REQUIRE(s.size() == size_t(p));
        check_complete(s, p * v, m, false);
        for (const ActionCosts costs : {ActionCosts{1, 1, 1}, ActionCosts{1, 2, 1}}) {
          const SimulationResult r = simulate(s, p * v, m, costs);
          REQUIRE(r.ok);
          CHECK(std::abs(r.bubble - double(p - 1) / (v * m + p - 1)) < 1e-12);
          for (int rank = 0; rank < p; ++rank)  // Megatron's warm-up, and the one in steady state
            CHECK(r.peak_in_flight[rank] == std::min(2 * (p - rank - 1) + (v - 1) * p + 1, m * v));
        }
        CHECK(std::abs(predicted_bubble(ScheduleKind::kInterleaved1F1B, p, m, v) -
                       double(p - 1) / (v * m + p - 1)) < 1e-12);
      }
    }
  }
}

TEST_CASE("ZB-H1: W after B, at most p held, bubble below 1F1B's", "[pipeline]") {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 16; ++m) {
      INFO("zbh1 p=" << p << " m=" << m);
      const Schedule s = make_schedule(ScheduleKind::kZeroBubbleH1, p, m);
      REQUIRE(s.size() == size_t(p));
      check_complete(s, p, m, true);
      for (int r = 0; r < p; ++r) {  // 1F1B's forwards and backwards, in 1F1B's order
        std::vector<Action> fb;
        for (const Action& a : s[size_t(r)])
          if (a.type != Action::Type::kWeight) fb.push_back(a);
        CHECK(fb == make_schedule(ScheduleKind::k1F1B, p, m)[size_t(r)]);
      }
      const SimulationResult r = simulate(s, p, m);  // F = B = W = 1
      REQUIRE(r.ok);
      for (int rank = 0; rank < p; ++rank) CHECK(r.peak_in_flight[rank] <= std::min(p, m));
      if (m >= p) CHECK(std::abs(r.bubble - double(p - 1) / (3 * m + p - 1)) < 1e-12);
      const double one_f_one_b = predicted_bubble(ScheduleKind::k1F1B, p, m);
      CHECK(std::abs(one_f_one_b - predicted_bubble(p, m)) < 1e-12);  // B = 2F: the same formula
      if (p > 1) CHECK(predicted_bubble(ScheduleKind::kZeroBubbleH1, p, m) < one_f_one_b);
      // Under other costs too (W twice B, say) it still runs.
      CHECK(simulate(s, p, m, {1, 1, 2}).ok);
    }
  }
}

TEST_CASE("ZB-H1 on 2 stages, 3 microbatches, by hand", "[pipeline]") {
  // 1F1B's order of F and B. Rank 0 would forward microbatch 2 while 0 and
  // 1 are held: over p = 2, so it runs W0 first; W1 fills the step it waits
  // for B2's gradient. Rank 1 runs W0 while F2 is on its way. 2 idle cells
  // of 20: (p-1)/(3m+p-1) = 1/10, against 1F1B's 1/4.
  const Schedule expected{{F(0, 0), F(1, 0), B(0, 0), W(0, 0), F(2, 0), B(1, 0), W(1, 0),
                           B(2, 0), W(2, 0)},
                          {F(0, 1), B(0, 1), F(1, 1), B(1, 1), W(0, 1), F(2, 1), B(2, 1),
                           W(1, 1), W(2, 1)}};
  const Schedule s = make_schedule(ScheduleKind::kZeroBubbleH1, 2, 3);
  CHECK(s == expected);
  CHECK(to_table(s, 2, 3) ==
        "rank 0: F0 F1 .  B0 W0 F2 B1 W1 B2 W2\n"
        "rank 1: .  F0 B0 F1 B1 W0 F2 B2 W1 W2\n");
  CHECK(simulate(s, 2, 3).bubble == 0.1);
  CHECK(simulate(s, 2, 3).peak_in_flight == std::vector<int>{2, 2});
}

TEST_CASE("interleaved 1F1B on 2 ranks, 4 stages, 2 microbatches, by hand", "[pipeline]") {
  // Stages 0 and 2 on rank 0, 1 and 3 on rank 1. Rank 0 warms up with
  // 2(p-1) + (v-1)p = 4 forwards: microbatches 0 and 1 through stage 0, then
  // through stage 2 (their activations came back round from rank 1).
  const Schedule s = make_schedule(ScheduleKind::kInterleaved1F1B, 2, 2, 2);
  CHECK(s[0] == std::vector<Action>{F(0, 0), F(1, 0), F(0, 2), F(1, 2), B(0, 2), B(1, 2),
                                    B(0, 0), B(1, 0)});
  CHECK(s[1] == std::vector<Action>{F(0, 1), F(1, 1), F(0, 3), B(0, 3), F(1, 3), B(1, 3),
                                    B(0, 1), B(1, 1)});
  // The wrap-around: F0s2 on rank 0 starts the step after F0s1 on rank 1.
  CHECK(to_table(s, 4, 2) ==
        "rank 0: F0s0 F1s0 F0s2 F1s2 .    B0s2 .    B1s2 B0s0 B1s0\n"
        "rank 1: .    F0s1 F1s1 F0s3 B0s3 F1s3 B1s3 B0s1 B1s1 .\n");
  CHECK(simulate(s, 4, 2).bubble == 0.2);  // (p-1)/(vm+p-1) = 1/5
}

TEST_CASE("actions that take several steps fill several cells", "[pipeline]") {
  CHECK(to_table(make_schedule(ScheduleKind::k1F1B, 2, 2), 2, 2, {1, 2, 1}) ==
        "rank 0: F0 F1 .  .  B0 B0 .  B1 B1\n"
        "rank 1: .  F0 B0 B0 F1 B1 B1 .  .\n");
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
  SECTION("a W before its B, and a B without its W") {
    Schedule z = make_schedule(ScheduleKind::kZeroBubbleH1, 2, 3);
    std::swap(z[1][1], z[1][4]);  // rank 1: F0 W0 F1 B1 B0 ...
    CHECK_THAT(simulate(z, 2, 3).error,
               Catch::Contains("rank 1 runs W0s1 (position 1) before its backward B0s1"));
    z = make_schedule(ScheduleKind::kZeroBubbleH1, 2, 3);
    z[0].pop_back();  // W2s0
    CHECK_THAT(simulate(z, 2, 3).error, Catch::Contains("W2s0 is missing (it belongs on rank 0)"));
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
  CHECK(parse_schedule("interleaved") == ScheduleKind::kInterleaved1F1B);
  CHECK(parse_schedule("zbh1") == ScheduleKind::kZeroBubbleH1);
  CHECK_THROWS_AS(parse_schedule("zb"), InvalidArgument);
  CHECK_THROWS_WITH(parse_schedule("zb"), Catch::Contains("unknown schedule \"zb\"") &&
                                              Catch::Contains("gpipe, 1f1b, interleaved, zbh1"));
  // Interleaving: m a multiple of p, at least 2 stages per rank; the others one.
  CHECK_THROWS_AS(make_schedule(ScheduleKind::kInterleaved1F1B, 4, 6, 2), InvalidArgument);
  CHECK_THROWS_WITH(make_schedule(ScheduleKind::kInterleaved1F1B, 4, 6, 2),
                    Catch::Contains("6 microbatches is not a multiple of the 4 ranks") &&
                        Catch::Contains("use 4, 8, 12"));
  CHECK_THROWS_WITH(make_schedule(ScheduleKind::kInterleaved1F1B, 2, 4, 1),
                    Catch::Contains("1 stage(s) per rank; interleaving needs at least 2"));
  CHECK_THROWS_WITH(make_schedule(ScheduleKind::kZeroBubbleH1, 2, 4, 2),
                    Catch::Contains("make_schedule(zbh1): runs one stage per rank, not 2"));
  CHECK_THAT(simulate(make_schedule(ScheduleKind::kGPipe, 2, 2), 2, 2, {0, 1, 1}).error,
             Catch::Contains("action costs must be >= 1"));
}
