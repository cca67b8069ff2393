// spmdrun's diagnosis of failed spmd jobs, with real workers that run real
// collectives (spmd_test_comm_worker): the merged flight-recorder report of
// a rank killed in the middle of a collective, and --hang-timeout's
// wavefront table for a rank that sleeps, stops or spins in its own code
// while the others wait in all_reduce (of the world, or of a subgroup), and
// --preflight.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "launch_helpers.h"

using namespace spmd::test;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> comm_job(int nproc, const std::string& tag,
                                  const std::vector<std::string>& worker_args,
                                  const std::vector<std::string>& launcher_args = {}) {
  std::vector<std::string> args = {"--standalone", "--nproc-per-node", std::to_string(nproc)};
  args.insert(args.end(), launcher_args.begin(), launcher_args.end());
  args.push_back(SPMD_TEST_COMM_WORKER_PATH);
  args.insert(args.end(), worker_args.begin(), worker_args.end());
  args.insert(args.end(), {"--tag", tag});
  return args;
}

}  // namespace

TEST_CASE("spmdrun: a rank killed mid-collective; the survivors' flight records, merged",
          "[launcher][flight]") {
  const std::string tag = unique_tag();
  const fs::path logs = fs::temp_directory_path() / tag;
  RunResult r = run_spmdrun(comm_job(3, tag, {"--kill-rank", "1", "--timeout-ms", "20000"},
                                     {"--log-dir", logs.string(), "--run-id", "job"}),
                            60s);
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("first to fail : rank 1") != std::string::npos);
  CHECK(r.err.find("spmdrun: flight recorder: the last operations of 2 dump(s)") !=
        std::string::npos);
  // The merged file: each survivor's operations in the order it issued them.
  std::ifstream in(logs / "job" / "attempt_0" / "flight" / "flight_recorder.json");
  REQUIRE(in);
  const auto dumps = nlohmann::json::parse(in);
  REQUIRE(dumps.size() == 2);
  CHECK(dumps[0]["rank"] == 0);
  CHECK(dumps[1]["rank"] == 2);
  for (const auto& d : dumps) {
    const auto& ops = d["ops"];
    REQUIRE(ops.size() == 3);
    CHECK(ops[0]["op"] == "barrier");
    CHECK(ops[1]["op"] == "all_reduce");
    CHECK(ops[1]["state"] == "completed");
    CHECK(ops[2]["op"] == "all_reduce");
    CHECK(ops[2]["seq"] == 2);
    CHECK(ops[2]["state"] == "failed");
    CHECK_THAT(d["reason"].get<std::string>(),
               Catch::Contains("all_reduce #2 in group world") && Catch::Contains("rank 1"));
  }
  CHECK(r.err.find("#2 all_reduce 32 MiB f32: failed") != std::string::npos);
  // The wavefront: the dead rank named first, the collective the others were in.
  CHECK(r.err.find("spmdrun: wavefront: rank 1 was killed by signal 9 (SIGKILL) while the others "
                   "were at collective #2 of group world (all_reduce(f32[8388608]))") !=
        std::string::npos);
  CHECK(wait_until_gone(tag, 10s));
  fs::remove_all(logs);
}

TEST_CASE("spmdrun --hang-timeout: a rank asleep in its own code is named, the job torn down",
          "[launcher][hang]") {
  const std::string tag = unique_tag();
  RunResult r = run_spmdrun(
      comm_job(3, tag, {"--sleep-rank", "1", "--timeout-ms", "60000"}, {"--hang-timeout", "2"}),
      60s);
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.seconds < 30);  // well before the collectives' own 60 s timeout
  const std::string first = line_after(r.err, "spmdrun: hang: ");
  CHECK_THAT(first,
             Catch::StartsWith("rank 1 never entered collective #2 of group world "
                               "(all_reduce(f32[1000])), where ranks 0, 2 wait; its process is "
                               "asleep (state S), 0.0 s of CPU in the last "));
  // The table: a row per rank, the waiting ones naming rank 1 and the bytes
  // they wait for from it: the whole 1000-f32 buffer (4000 B) behind its
  // 32-byte header, none of it arrived (its post in the group segment, or
  // recursive doubling's exchange over TCP).
  CHECK(line_after(r.err, "  0  ")
            .find("asleep (S)  world  all_reduce(f32[1000])  2    in the "
                  "collective for") != std::string::npos);
  CHECK(line_after(r.err, "  1  ").find("in its own code (#0-#1 done)") != std::string::npos);
  CHECK(count(r.err, "  rank 1 (0/4032 B from rank 1)\n") == 2);  // ranks 0 and 2 wait on it
  CHECK(wait_until_gone(tag, 10s));                               // no orphan
}

TEST_CASE("spmdrun --hang-timeout: a stopped rank is named and killed at once",
          "[launcher][hang]") {
  // SIGSTOP in its own code: it cannot act on SIGTERM, so the launcher
  // SIGKILLs it rather than wait out --stop-grace (30 s by default).
  const std::string tag = unique_tag();
  RunResult r = run_spmdrun(
      comm_job(3, tag, {"--stop-rank", "1", "--timeout-ms", "60000"}, {"--hang-timeout", "2"}),
      60s);
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.seconds < 2 + 5);
  CHECK_THAT(line_after(r.err, "spmdrun: hang: "),
             Catch::StartsWith("rank 1's process is stopped (state T: SIGSTOP, or a debugger): "
                               "ranks 0, 2 wait for it in collective #2 of group world "
                               "(all_reduce(f32[1000]))"));
  CHECK(line_after(r.err, "  1  ").find("stopped (T)") != std::string::npos);
  CHECK(r.err.find("is stopped and cannot act on SIGTERM: SIGKILL") != std::string::npos);
  CHECK(wait_until_gone(tag, 10s));
}

TEST_CASE("spmdrun --hang-timeout: a rank spinning outside a subgroup's collective",
          "[launcher][hang]") {
  // The collective runs on a group split from the world (world/split0.0,
  // where it is #0): the launcher finds it through the ranks' group lists.
  const std::string tag = unique_tag();
  RunResult r =
      run_spmdrun(comm_job(3, tag, {"--spin-rank", "2", "--subgroup", "--timeout-ms", "60000"},
                           {"--hang-timeout", "2"}),
                  60s);
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.seconds < 2 + 5);
  const std::string first = line_after(r.err, "spmdrun: hang: ");
  CHECK_THAT(first, Catch::StartsWith("rank 2 never entered collective #0 of group world/split0.0 "
                                      "(all_reduce(f32[1000])), where ranks 0, 1 wait; its "
                                      "process is running (state R), "));
  // Spinning, it used CPU all the while it could get a core (a sleeping rank
  // uses none); on a loaded 2-core machine a fifth of the time is certain.
  double cpu = 0, wall = 0;
  REQUIRE(std::sscanf(first.substr(first.find("(state R), ")).c_str(),
                      "(state R), %lf s of CPU in the last %lf s", &cpu, &wall) == 2);
  CHECK(cpu > 0.2 * wall);
  CHECK(line_after(r.err, "  0  ").find("world/split0.0  all_reduce(f32[1000])  0") !=
        std::string::npos);
  CHECK(line_after(r.err, "  2  ").find("running (R)") != std::string::npos);
  CHECK(wait_until_gone(tag, 10s));
}

TEST_CASE("spmdrun --hang-timeout: a bad value is refused before anything starts",
          "[launcher][hang]") {
  RunResult r = run_spmdrun({"--standalone", "--hang-timeout", "-1", "true"}, 20s);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("--hang-timeout: must be at least 0, got -1") != std::string::npos);
}

TEST_CASE("spmdrun --preflight: every check passes, then the program runs",
          "[launcher][preflight]") {
  const std::string tag = unique_tag();
  RunResult r = run_spmdrun(comm_job(3, tag, {}, {"--preflight"}), 60s);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  for (const char* line :
       {"preflight: rank 1: store: ok", "preflight: tcp: ok (all_reduce of 3 ranks)",
        "preflight: clock: ok (1 node(s)", "preflight: versions: ok"}) {
    CHECK(r.out.find(line) != std::string::npos);
  }
  const size_t passed = r.err.find("spmdrun: preflight passed on ranks 0..2");
  CHECK(passed != std::string::npos);
  CHECK(count(r.out, "DONE rank") == 3);
}

TEST_CASE("spmdrun --preflight: a failed check names the rank and the check; nothing starts",
          "[launcher][preflight]") {
  SECTION("clock") {
    RunResult r = run_spmdrun(comm_job(2, unique_tag(), {}, {"--preflight"}), 60s,
                              {"SPMD_PREFLIGHT_MAX_SKEW_MS=-1"});
    INFO(r.out << r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.out.find("preflight: rank 0: clock: FAILED: the nodes' clocks differ") !=
          std::string::npos);
    CHECK(r.err.find("preflight failed on rank 0") != std::string::npos);
    CHECK(r.out.find("DONE") == std::string::npos);
  }
  SECTION("versions") {
    // Rank 1 reports another version of the job's own code.
    const fs::path script = fs::temp_directory_path() / (unique_tag() + ".sh");
    {
      std::ofstream out(script);
      out << "#!/bin/sh\nSPMD_PREFLIGHT_VERSIONS=code-v$RANK exec " << SPMD_PREFLIGHT_PATH << "\n";
    }
    fs::permissions(script, fs::perms::owner_all);
    RunResult r = run_spmdrun(comm_job(2, unique_tag(), {}, {"--preflight"}), 60s,
                              {"SPMD_PREFLIGHT_PROGRAM=" + script.string()});
    INFO(r.out << r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.out.find("preflight: rank 1: versions: FAILED: rank 1 runs") != std::string::npos);
    CHECK(r.out.find("code-v1 but rank 0 runs") != std::string::npos);
    CHECK(r.out.find("DONE") == std::string::npos);
    fs::remove(script);
  }
}
