// spmdrun's diagnosis of failed spmd jobs, with real workers that run real
// collectives (spmd_test_comm_worker): the merged flight-recorder report of
// a rank killed in the middle of a collective, and --hang-timeout's
// wavefront table for a rank that sleeps in its own code while the others
// wait in all_reduce, and --preflight.
#include <catch2/catch.hpp>
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
  CHECK(first ==
        "rank 1 never entered collective #2 of group world (all_reduce(f32[1000])), where ranks "
        "0, 2 wait");
  // The table: a row per rank, the waiting ones naming rank 1 and the bytes
  // they wait for from it: the whole 1000-f32 buffer (4000 B) behind its
  // 32-byte header, none of it arrived (its post in the group segment, or
  // recursive doubling's exchange over TCP).
  CHECK(line_after(r.err, "  0  ").find("all_reduce(f32[1000])  2    in the collective for") !=
        std::string::npos);
  CHECK(line_after(r.err, "  1  ").find("in its own code (#0-#1 done)") != std::string::npos);
  CHECK(count(r.err, "  rank 1 (0/4032 B from rank 1)\n") == 2);  // ranks 0 and 2 wait on it
  CHECK(wait_until_gone(tag, 10s));        // no orphan
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
