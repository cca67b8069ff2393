// Running spmdrun from a test: a real process with its output captured, a
// deadline on every wait, and a look at the process table to prove that no
// worker outlived its launcher.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace spmd::test {

using namespace std::chrono_literals;

// The binaries under test (paths fixed at build time).
std::string spmdrun_path();
std::string worker_path();

// One spmdrun process. Its stdout and stderr are read into out() and err().
class LauncherProcess {
 public:
  // Starts `spmdrun args...`; extra_env ("NAME=value") is added to this
  // process's environment, unset_env names are removed from it.
  explicit LauncherProcess(const std::vector<std::string>& args,
                           const std::vector<std::string>& extra_env = {},
                           const std::vector<std::string>& unset_env = {});
  // Kills the launcher (SIGKILL) if it still runs.
  ~LauncherProcess();

  // Reads output until `text` has appeared `times` times in stdout + stderr;
  // false when `timeout` passes first.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds timeout, int times = 1);
  // Reads output until the launcher exits; false when `timeout` passes first.
  bool wait_exit(std::chrono::milliseconds timeout);
  // The exit code (128 + N after signal N), valid after wait_exit().
  int exit_code() const;
  void send_signal(int sig);

  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }
  std::string all() const { return out_ + err_; }
  pid_t pid() const { return pid_; }

 private:
  void read_some(int timeout_ms);

  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  std::string out_, err_;
  bool exited_ = false;
  int status_ = 0;
};

// Runs spmdrun to its end; FAILs the test when it runs past `timeout`.
struct RunResult {
  int exit_code;
  std::string out, err;
  double seconds;
};
RunResult run_spmdrun(const std::vector<std::string>& args, std::chrono::milliseconds timeout,
                      const std::vector<std::string>& extra_env = {},
                      const std::vector<std::string>& unset_env = {});

// Live processes whose command line contains `tag` (zombies have none).
std::vector<pid_t> processes_with_tag(const std::string& tag);
// Waits until no live process carries `tag`; false when `timeout` passes first.
bool wait_until_gone(const std::string& tag, std::chrono::milliseconds timeout);

// A tag no other test uses: "spmdtag-<pid>-<n>".
std::string unique_tag();
// A TCP port that was free a moment ago.
int free_port();
// How many times `needle` occurs in `haystack`.
int count(const std::string& haystack, const std::string& needle);
// The rest of the line after the first `prefix` in `text`; "" when absent.
std::string line_after(const std::string& text, const std::string& prefix);

}  // namespace spmd::test
