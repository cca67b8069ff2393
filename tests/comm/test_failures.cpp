// Failure is loud and bounded: a rank killed mid-collective, a rank that
// never comes, ranks that disagree on a size, dtype or op, and point-to-point
// messages nobody answers. Each case runs real processes through a
// FileStore (which outlives any rank) and checks, in the parent, every
// surviving rank's error message and how long it took to fail.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "harness.h"
#include "parallel/comm/init.h"
#include "survivors.h"

using namespace spmd;
using namespace spmd::dist;
using namespace spmd::dist::testing;

TEST_CASE("a rank killed mid-collective makes every other rank fail fast, naming it",
          "[comm][failure]") {
  const int world = 4, victim = 2;
  auto outcomes = run_processes(world, [&](int rank, const std::string& store) {
    auto g = join(rank, world, store, std::chrono::seconds(10));
    g->barrier().wait();
    Tensor big = floats(16 << 20, 1.f);  // 64 MiB: long enough to be killed in the middle
    Work w = g->all_reduce(big);
    // At once: zero copy finished a 64 MiB all_reduce within a 20 ms pause.
    if (rank == victim) ::kill(::getpid(), SIGKILL);
    report_outcome([&] { w.wait(); });
    std::string first = "";
    // Later collectives fail at once, with the same cause.
    try {
      g->barrier().wait();
    } catch (const CommError& e) {
      first = e.what();
    }
    if (first.find("aborted by an earlier failure") == std::string::npos) {
      report("a later collective did not fail at once: " + first);
    }
  });
  // Well within the 10 s timeout.
  check_survivors_failed(outcomes, victim, {"all_reduce #1 in group world", "rank 2"});
}

TEST_CASE("a rank that skips a collective makes the others time out, naming it",
          "[comm][failure]") {
  check_absent_rank_named(/*world=*/3, /*absent=*/1, /*elements=*/1000);
}

TEST_CASE("ranks that disagree on size, dtype or op get an error saying so", "[comm][failure]") {
  struct Case {
    const char* name;
    std::function<Work(ProcessGroup&, int rank)> call;
    const char* says;
  };
  const Case cases[] = {
      {"size",
       [](ProcessGroup& g, int r) { return g.all_reduce(floats(r == 2 ? 999 : 1000, 1.f)); },
       "different sizes"},
      {"dtype",
       [](ProcessGroup& g, int r) {
         return g.all_reduce(r == 2 ? cpu_tensor(1000, DType::kF64) : floats(1000, 1.f));
       },
       "different sizes or dtypes"},
      {"op",
       [](ProcessGroup& g, int r) {
         return r == 2 ? g.broadcast(floats(1000, 1.f), 0) : g.all_reduce(floats(1000, 1.f));
       },
       "different collectives"},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      const int world = 3;
      auto outcomes = run_processes(world, [&](int rank, const std::string& store) {
        auto g = join(rank, world, store, std::chrono::seconds(5));
        g->barrier().wait();
        report_outcome([&] { c.call(*g, rank).wait(); });
      });
      int told = 0;  // ranks whose error names the disagreement itself
      for (int r = 0; r < world; ++r) {
        INFO("rank " << r << ": " << outcomes[r].report);
        CHECK(outcomes[r].exited_ok());
        CHECK(outcomes[r].report != "ok");
        CHECK(reported_ms(outcomes[r].report) < 4000);  // none waits for the timeout
        CHECK_THAT(outcomes[r].report, Catch::Contains("#1 in group world"));
        if (outcomes[r].report.find(c.says) != std::string::npos) ++told;
      }
      CHECK(told == world);  // directly, or through the group's abort record
    }
  }
}

TEST_CASE("point-to-point: an unanswered recv times out, naming the tag and the peer",
          "[comm][failure][p2p]") {
  auto outcomes = run_processes(2, [](int rank, const std::string& store) {
    auto g = join(rank, 2, store, std::chrono::milliseconds(700));
    if (rank == 0) {
      report_outcome([&] { g->recv(floats(10, 0.f), 1, /*tag=*/42).wait(); });  // nobody sends
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    }
  });
  INFO(outcomes[0].report);
  CHECK(outcomes[0].exited_ok());
  CHECK(outcomes[1].exited_ok());
  REQUIRE(outcomes[0].report.rfind("timeout|", 0) == 0);
  CHECK_THAT(outcomes[0].report, Catch::Contains("tag 42") && Catch::Contains("rank 1"));
}

// A send and its recv that disagree on size or dtype fail both ranks, each
// with the text that names both sides, well within the 5 s timeout. Rank 1
// sends, then waits on a recv from rank 0 (which never sends): a small send
// has completed before rank 0 refuses it, so the refusal fails that recv; a
// 32 MiB send is still being written, so the refusal fails the send itself
// (or, if the kernel took it all first, the recv after it).
TEST_CASE("point-to-point: a mismatched send and recv fail both ranks, naming both",
          "[comm][failure][p2p]") {
  struct Case {
    int64_t sent, expected;
    DType expected_dtype;
    const char* sent_text;
    const char* expected_text;
  };
  const Case cases[] = {
      {16, 8, DType::kF32, "send of 16 f32 elements", "recv of 8 f32 elements"},
      {16, 16, DType::kI32, "send of 16 f32 elements", "recv of 16 i32 elements"},
      {8 << 20, 4 << 20, DType::kF32, "send of 8388608 f32 elements",
       "recv of 4194304 f32 elements"},
  };
  for (const Case& c : cases) {
    auto outcomes = run_processes(2, [&](int rank, const std::string& store) {
      auto g = join(rank, 2, store, std::chrono::milliseconds(5000));
      if (rank == 0) {
        report_outcome([&] { g->recv(cpu_tensor(c.expected, c.expected_dtype), 1, 7).wait(); });
      } else {
        report_outcome([&] {
          g->send(floats(c.sent, 1.f), 0, 7).wait();
          g->recv(floats(1, 0.f), 0, 8).wait();  // rank 0 never sends this
        });
      }
    });
    INFO(outcomes[0].report << "\n" << outcomes[1].report);
    for (const RankOutcome& o : outcomes) {
      CHECK(o.exited_ok());
      REQUIRE(o.report.find('|') != std::string::npos);
      CHECK(o.report.rfind("timeout|", 0) != 0);
      CHECK(reported_ms(o.report) < 2500);  // promptly, not at the 5 s timeout
      CHECK_THAT(o.report, Catch::Contains(str_cat("rank 1's ", c.sent_text,
                                                   " (its message #0 "
                                                   "to rank 0, tag 7) does not match rank 0's ",
                                                   c.expected_text, " in group world")));
    }
    CHECK(outcomes[0].report.rfind("invalid|", 0) == 0);
    CHECK_THAT(outcomes[0].report, Catch::Contains("recv from rank 1 with tag 7"));
    CHECK_THAT(outcomes[1].report, Catch::Contains("rank 0 refused it"));
  }
}
