// Describing and stopping child processes.
#include "runtime/process.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
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

ProcessState read_process_state(pid_t pid) {
  ProcessState s;
  std::FILE* f = std::fopen(str_cat("/proc/", pid, "/stat").c_str(), "r");
  if (!f) return s;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "pid (comm) S ppid ...": comm may hold spaces and parentheses, so the
  // fields are counted from the last ')'. utime and stime are fields 14, 15.
  const char* p = std::strrchr(buf, ')');
  if (!p || p[1] != ' ') return s;
  const char state = p[2];
  unsigned long long utime = 0, stime = 0;
  if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) !=
      2)
    return s;
  s.state = state;
  s.cpu_s = double(utime + stime) / double(::sysconf(_SC_CLK_TCK));
  return s;
}

std::string describe_process_state(char state) {
  switch (state) {
    case 0:
      return "-";
    case 'R':
      return "running (state R)";
    case 'S':
      return "asleep (state S)";
    case 'D':
      return "in uninterruptible sleep (state D: I/O)";
    case 'T':
      return "stopped (state T: SIGSTOP, or a debugger)";
    case 't':
      return "stopped by a debugger (state t)";
    case 'Z':
      return "exited, not yet reaped (state Z)";
    default:
      return str_cat("state ", state);
  }
}

void terminate_and_reap(const std::vector<pid_t>& pids, std::chrono::milliseconds grace,
                        bool as_groups, std::vector<int>* statuses) {
  std::vector<bool> live(pids.size());
  for (size_t i = 0; i < pids.size(); ++i) {
    live[i] = pids[i] > 0;
    if (!live[i]) continue;
    const bool stopped = read_process_state(pids[i]).stopped();
    ::kill(as_groups ? -pids[i] : pids[i], stopped ? SIGKILL : SIGTERM);
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
