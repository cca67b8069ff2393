// The checks of runtime/flag_checks.h and runtime/resource_limits.h, against
// values worked out by hand: what each flag check accepts and what it says,
// the bounds of read_file_bounded (a regular file by its size, a stream by
// the limit, a directory named), and the process-group timeout from the
// environment.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/flag_checks.h"
#include "runtime/resource_limits.h"

using namespace spmd;

TEST_CASE("flag checks: counts", "[limits]") {
  CHECK(flags::count_error("1", 1, 10).empty());
  CHECK(flags::count_error("10", 1, 10).empty());
  CHECK(flags::count_error("0", 1, 10) == "must be at least 1, got 0");
  CHECK(flags::count_error("-3", 0, 10) == "must be at least 0, got -3");
  CHECK(flags::count_error("11", 1, 10) == "must be at most 10, got 11");
  CHECK(flags::count_error("1e9", 1, 1024) == "must be at most 1024, got 1e9");
  CHECK(flags::count_error("99999999999999999999", 1, 10) ==
        "must be at most 10, got "
        "99999999999999999999");
  CHECK(flags::count_error("1.5", 1, 10) == "must be a whole number, got '1.5'");
  CHECK(flags::count_error("nan", 1, 10) == "must be a whole number, got 'nan'");
  CHECK(flags::count_error("", 1, 10) == "must be a whole number, got ''");
}

TEST_CASE("flag checks: real numbers refuse nan and inf", "[limits]") {
  CHECK(flags::number_error("0.5", 0, 1, false).empty());
  CHECK(flags::number_error("0", 0, 1, false).empty());
  CHECK(flags::number_error("0", 0, 1, true) == "must be positive, got 0");
  CHECK(flags::number_error("-1", 0, 1, false) == "must be at least 0, got -1");
  CHECK(flags::number_error("2", 0, 1.5, false) == "must be at most 1.5, got 2");
  CHECK(flags::number_error("nan", 0, 1, false) == "must be a number, got nan");
  CHECK(flags::number_error("-inf", 0, 1, false) == "must be finite, got -inf");
  CHECK(flags::number_error("abc", 0, 1, false) == "must be a number, got 'abc'");
}

TEST_CASE("flag checks: CLI11 names the flag", "[limits]") {
  CLI::App app;
  int64_t steps = 1;
  double lr = 1;
  app.add_option("--steps", steps)->check(flags::count(1));
  app.add_option("--timeout", lr)->check(flags::seconds());
  std::vector<std::string> args = {"--steps", "0"};
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
    FAIL("no error for --steps 0");
  } catch (const CLI::ValidationError& e) {
    CHECK(std::string(e.what()) == "--steps: must be at least 1, got 0");
  }
  args = {"inf", "--timeout"};
  CHECK_THROWS_WITH(app.parse(args), Catch::Contains("--timeout: must be finite, got inf"));
  args = {"30", "--timeout"};
  app.parse(args);
  CHECK(lr == 30);
}

TEST_CASE("read_file_bounded: files, streams, folders", "[limits]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("spmd_limits_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "text").string();
  std::ofstream(file) << "hello\nworld\n";
  CHECK(read_file_bounded(file, "--data") == "hello\nworld\n");
  CHECK_THROWS_WITH(read_file_bounded(dir.string(), "--data"),
                    Catch::Contains("is a directory; give a file"));
  CHECK_THROWS_WITH(read_file_bounded((dir / "none").string(), "--data"),
                    Catch::Contains("No such file or directory"));
  // /dev/zero never ends: a stream is read up to the limit, then refused.
  CHECK_THROWS_WITH(read_file_bounded("/dev/zero", "--data", 1, 1 << 20),
                    Catch::Contains("/dev/zero is not a regular file and gave more than 1.0 MiB"));
  // A file whose bytes, times what the caller builds of them, cannot fit.
  CHECK_THROWS_AS(read_file_bounded(file, "--data", uint64_t(1) << 62), OutOfMemoryError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("memory: the budget and the check", "[limits]") {
  const MemoryBudget b = available_memory();
  CHECK(b.bytes > 0);
  CHECK(!b.source.empty());
  CHECK_NOTHROW(check_memory_fits("a byte", 1));
  CHECK_THROWS_WITH(check_memory_fits("an exabyte", uint64_t(1) << 60),
                    Catch::Contains("an exabyte needs about 1024.0 PiB, but only"));
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(3 << 10) == "3.0 KiB");
  CHECK(format_bytes(uint64_t(3) << 29) == "1.5 GiB");
}

TEST_CASE("process limits: descriptors and processes", "[limits]") {
  rlimit nofile{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &nofile) == 0);
  CHECK_NOTHROW(check_process_limits("--nproc-per-node 1", 1, 4));
  if (nofile.rlim_cur != RLIM_INFINITY) {
    const int64_t n = int64_t(nofile.rlim_cur);  // n processes of 4 descriptors: never fits
    CHECK_THROWS_WITH(check_process_limits("--nproc-per-node N", n, 4),
                      Catch::Contains("(ulimit -n)"));
  }
}

TEST_CASE("env: SPMD_PG_TIMEOUT_S", "[limits]") {
  auto env = [](std::map<std::string, std::string> vars) -> EnvLookup {
    return [vars](const std::string& name) -> std::optional<std::string> {
      auto it = vars.find(name);
      return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
  };
  CHECK(default_pg_timeout(env({})) == std::chrono::minutes(5));
  CHECK(default_pg_timeout(env({{"SPMD_PG_TIMEOUT_S", "30"}})) == std::chrono::seconds(30));
  CHECK(default_pg_timeout(env({{"SPMD_PG_TIMEOUT_S", "0.25"}})) == std::chrono::milliseconds(250));
  CHECK_THROWS_WITH(default_pg_timeout(env({{"SPMD_PG_TIMEOUT_S", "abc"}})),
                    Catch::Contains("SPMD_PG_TIMEOUT_S must be a number, got 'abc'"));
  CHECK_THROWS_WITH(default_pg_timeout(env({{"SPMD_PG_TIMEOUT_S", "0"}})),
                    Catch::Contains("must be positive"));
  CHECK_THROWS_WITH(default_pg_timeout(env({{"SPMD_PG_TIMEOUT_S", "inf"}})),
                    Catch::Contains("must be finite"));
}
