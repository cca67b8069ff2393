// The trace recorder's files, read back with an independent JSON parser
// (nlohmann::json), and the log level's parsing. The SPMD_TRACE case comes
// first: it needs a process whose recorder has not been started yet.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "runtime/logging.h"
#include "runtime/spawn.h"
#include "runtime/trace.h"

using namespace spmd;
using namespace std::chrono_literals;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const char* tag) {
  return "/tmp/spmd_test_" + std::string(tag) + "_" + std::to_string(::getpid());
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);
}

// The "X" events of a trace, by name.
std::map<std::string, json> spans(const json& trace) {
  std::map<std::string, json> out;
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "X") out[e["name"].get<std::string>()] = e;
  return out;
}

}  // namespace

TEST_CASE("trace: SPMD_TRACE=dir gives one file per rank", "[trace]") {
  std::string dir = temp_dir("trace_env");
  fs::remove_all(dir);
  ::setenv("SPMD_TRACE", dir.c_str(), 1);
  spawn(2, [](int rank) {
    TraceSpan span(rank == 0 ? "step_rank0" : "step_rank1", "compute");
    std::this_thread::sleep_for(5ms);
  });
  for (int rank : {0, 1}) {
    json trace = read_json(dir + "/trace_rank" + std::to_string(rank) + ".json");
    auto s = spans(trace);
    std::string name = "step_rank" + std::to_string(rank);
    REQUIRE(s.count(name) == 1);
    CHECK(s.size() == 1);  // each child records only its own spans
    CHECK(s[name]["pid"] == rank);
    CHECK(s[name]["dur"].get<int64_t>() >= 5000);
  }
  // A rank stopped by SIGTERM (spmdrun stopping the others) still writes its
  // file, and still dies of the signal.
  fs::remove_all(dir);
  CHECK_THROWS_WITH(spawn(1,
                          [](int) {
                            TraceSpan("before_sigterm", "compute").end();
                            ::raise(SIGTERM);
                            std::this_thread::sleep_for(30s);  // the flush thread ends it
                          }),
                    Catch::Contains("SIGTERM"));
  CHECK(spans(read_json(dir + "/trace_rank0.json")).count("before_sigterm") == 1);
  ::unsetenv("SPMD_TRACE");
  fs::remove_all(dir);
}

TEST_CASE("trace: nested spans, categories and escaping", "[trace]") {
  std::string dir = temp_dir("trace_api");
  fs::remove_all(dir);
  trace_start(dir, 3);
  REQUIRE(trace_enabled());
  {
    TraceSpan outer("forward", "compute");
    std::this_thread::sleep_for(2ms);
    {
      TraceSpan inner("all_reduce \"grads\"\n", "comm");
      std::this_thread::sleep_for(3ms);
    }
  }
  std::thread([] { TraceSpan t("on another thread"); }).join();
  trace_flush();
  CHECK(trace_path() == dir + "/trace_rank3.json");
  json trace = read_json(trace_path());
  auto s = spans(trace);
  REQUIRE(s.count("forward") == 1);
  REQUIRE(s.count("all_reduce \"grads\"\n") == 1);
  const json& outer = s["forward"];
  const json& inner = s["all_reduce \"grads\"\n"];
  CHECK(inner["cat"] == "comm");
  CHECK(outer["pid"] == 3);
  CHECK(outer["ts"].get<int64_t>() <= inner["ts"].get<int64_t>());
  CHECK(inner["ts"].get<int64_t>() + inner["dur"].get<int64_t>() <=
        outer["ts"].get<int64_t>() + outer["dur"].get<int64_t>());
  CHECK(inner["dur"].get<int64_t>() >= 3000);
  CHECK(s["on another thread"]["tid"] != outer["tid"]);
  CHECK(trace["traceEvents"][0]["args"]["name"] == "rank 3");
  fs::remove_all(dir);
}

TEST_CASE("trace: args, and async intervals as a b/e pair with an id unique to the rank",
          "[trace]") {
  std::string dir = temp_dir("trace_async");
  fs::remove_all(dir);
  trace_start(dir, 2);
  trace_record("step", "compute", 1000, 50, {{"step", int64_t(7)}});
  trace_record_async("all_reduce", "comm", 1010, 30,
                     {{"op", std::string("all_reduce")}, {"bytes", int64_t(4096)}});
  trace_record_async("all_reduce", "comm", 1020, 30, {});
  trace_flush();
  json trace = read_json(trace_path());
  std::vector<json> begins, ends;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "b") begins.push_back(e);
    if (e["ph"] == "e") ends.push_back(e);
  }
  CHECK(spans(trace)["step"]["args"]["step"] == 7);
  REQUIRE(begins.size() == 2);
  REQUIRE(ends.size() == 2);
  CHECK(begins[0]["args"]["op"] == "all_reduce");
  CHECK(begins[0]["args"]["bytes"] == 4096);
  CHECK(begins[0]["ts"] == 1010);
  CHECK(ends[0]["ts"] == 1040);
  CHECK(begins[0]["id"] == ends[0]["id"]);
  CHECK(begins[0]["id"] != begins[1]["id"]);
  CHECK(begins[0]["id"].get<std::string>().rfind("0x2", 0) == 0);  // rank 2 in the high bits
  fs::remove_all(dir);
}

TEST_CASE("logging: levels parse, unknown ones are refused", "[logging]") {
  CHECK(parse_log_level("debug") == LogLevel::kDebug);
  CHECK(parse_log_level("INFO") == LogLevel::kInfo);
  CHECK(parse_log_level("Warning") == LogLevel::kWarn);
  CHECK(parse_log_level("error") == LogLevel::kError);
  CHECK(parse_log_level("off") == LogLevel::kOff);
  CHECK_THROWS_WITH(parse_log_level("verbose"), Catch::Contains("SPMD_LOG_LEVEL='verbose'"));
  set_log_level(LogLevel::kError);
  CHECK_FALSE(log_enabled(LogLevel::kWarn));
  CHECK(log_enabled(LogLevel::kError));
  set_log_level(LogLevel::kOff);
  CHECK_FALSE(log_enabled(LogLevel::kError));
}

TEST_CASE("logging: each line carries the rank prefix", "[logging]") {
  // Capture stderr through a pipe while one line is written.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  int saved = ::dup(2);
  ::dup2(fds[1], 2);
  set_log_level(LogLevel::kInfo);
  set_log_rank(5);
  SPMD_LOG_INFO("hello ", 42);
  SPMD_LOG_DEBUG("not shown");
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fds[1]);
  char buf[512] = {};
  ssize_t n = ::read(fds[0], buf, sizeof buf - 1);
  ::close(fds[0]);
  std::string out(buf, n > 0 ? static_cast<size_t>(n) : 0);
  CHECK(out.rfind("[rank 5] I ", 0) == 0);
  CHECK(out.find("hello 42\n") != std::string::npos);
  CHECK(out.find("not shown") == std::string::npos);
  set_log_level(LogLevel::kWarn);
}
