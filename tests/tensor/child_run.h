// Running this test binary again, on one hidden test case, under an
// environment of its own: for what a process reads once (OpenBLAS's core,
// the host allocator's settings), each environment needs a fresh process.
#pragma once

#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

namespace spmd::test {

struct ChildRun {
  int status = 0;   // as pclose returns it: 0 when the child passed
  std::string out;  // its stdout and stderr
};

// Runs `env <env_args> <this binary> '<test_case>'` and collects its output.
// env_args: what env(1) takes before the command ("-u VAR", "VAR=value").
inline ChildRun run_self(const std::string& env_args, const std::string& test_case) {
  std::array<char, 4096> self{};
  const ssize_t n = readlink("/proc/self/exe", self.data(), self.size() - 1);
  REQUIRE(n > 0);
  const std::string cmd =
      "env " + env_args + " '" + std::string(self.data(), size_t(n)) + "' '" + test_case + "' 2>&1";
  ChildRun r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 1024> buf{};
  while (fgets(buf.data(), int(buf.size()), p)) r.out += buf.data();
  r.status = pclose(p);
  UNSCOPED_INFO(cmd << "\n" << r.out);  // shown with the caller's next failed check
  return r;
}

}  // namespace spmd::test
