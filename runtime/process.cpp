// Describing and stopping child processes.
#include "runtime/process.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include <cerrno>
#include <thread>

#include "runtime/error.h"

namespace spmd {

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);  // "KILL" (glibc >= 2.32)
  if (abbrev) return std::string("SIG") + abbrev;
  return str_cat("signal ", sig);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return str_cat("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return str_cat("was killed by signal ", sig, " (", signal_name(sig), ")",
                   WCOREDUMP(status) ? " (core dumped)" : "");
  }
  return str_cat("stopped with wait status ", status);
}

bool wait_status_failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

void terminate_and_reap(const std::vector<pid_t>& pids, std::chrono::milliseconds grace,
                        bool as_groups, std::vector<int>* statuses) {
  std::vector<bool> live(pids.size());
  for (size_t i = 0; i < pids.size(); ++i) {
    live[i] = pids[i] > 0;
    if (live[i]) ::kill(as_groups ? -pids[i] : pids[i], SIGTERM);
  }
  auto reap = [&](int flags) {
    bool any = false;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (!live[i]) continue;
      int status = 0;
      pid_t r = ::waitpid(pids[i], &status, flags);
      if (r == pids[i] || (r < 0 && errno == ECHILD)) {
        live[i] = false;
        if (r == pids[i] && statuses) (*statuses)[i] = status;
      } else {
        any = true;
      }
    }
    return any;
  };
  auto deadline = std::chrono::steady_clock::now() + grace;
  auto pause = std::chrono::milliseconds(1);
  while (reap(WNOHANG) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  for (size_t i = 0; i < pids.size(); ++i)
    if (live[i]) ::kill(as_groups ? -pids[i] : pids[i], SIGKILL);
  reap(0);
}

}  // namespace spmd
