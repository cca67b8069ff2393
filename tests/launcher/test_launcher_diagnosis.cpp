// spmdrun's diagnosis of failed spmd jobs, with real workers that run real
// collectives (spmd_test_comm_worker): the merged flight-recorder report of
// a rank killed in the middle of a collective.
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
  RunResult r = run_spmdrun(
      comm_job(3, tag, {"--kill-rank", "1", "--timeout-ms", "20000"},
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
    CHECK_THAT(d["reason"].get<std::string>(), Catch::Contains("all_reduce #2 in group world") &&
                                                   Catch::Contains("rank 1"));
  }
  CHECK(r.err.find("#2 all_reduce 32 MiB f32: failed") != std::string::npos);
  CHECK(wait_until_gone(tag, 10s));
  fs::remove_all(logs);
}
