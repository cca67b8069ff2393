// Running a shell command from a test: its exit status and everything it
// printed (stdout and stderr), for tests that hand work to a peer such as
// PyTorch and read its verdict.
#pragma once

#include <sys/wait.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <utility>

namespace spmd::test {

// Runs `command` through the shell; returns its exit status (-1 when it did
// not exit normally) and its output.
inline std::pair<int, std::string> run_command(const std::string& command) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace spmd::test
