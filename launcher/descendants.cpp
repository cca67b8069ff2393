// Finding, killing and reaping what the workers leave behind, through /proc
// and the subreaper's waitpid().
#include "launcher/descendants.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/error.h"
#include "runtime/logging.h"

namespace spmd::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// Parses /proc/<pid>/stat: "pid (comm) state ppid pgrp ...". The name may
// hold spaces and parentheses, so it ends at the last ')'.
bool read_stat(pid_t pid, ProcessInfo* p) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(f, text)) return false;  // gone meanwhile
  const size_t open = text.find('('), close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 >= text.size())
    return false;
  p->pid = pid;
  p->comm = text.substr(open + 1, close - open - 1);
  std::istringstream rest(text.substr(close + 2));
  rest >> p->state >> p->ppid >> p->pgrp;
  return !rest.fail();
}

// Every process for which `match` is true.
std::vector<ProcessInfo> processes_where(const std::function<bool(const ProcessInfo&)>& match) {
  std::vector<ProcessInfo> out;
  DIR* dir = ::opendir("/proc");
  if (!dir) return out;
  while (const dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    ProcessInfo p;
    if (*end == '\0' && pid > 0 && read_stat(static_cast<pid_t>(pid), &p) && match(p))
      out.push_back(p);
  }
  ::closedir(dir);
  return out;
}

}  // namespace

bool become_subreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0) return true;
  SPMD_LOG_WARN("cannot become a child subreaper (", std::strerror(errno),
                "): what a worker starts and leaves may outlive the job");
  return false;
}

std::vector<ProcessInfo> end_group(pid_t pgid) {
  std::vector<ProcessInfo> left =
      processes_where([&](const ProcessInfo& p) { return p.pgrp == pgid && p.state != 'Z'; });
  ::kill(-pgid, SIGKILL);  // whatever the scan saw: one forked since is in the group too
  // SIGKILL lands a moment later. Wait (a second at most) until each is a
  // zombie or gone, so that a look at this process's adopted children just
  // after does not find them running and count them twice.
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  for (const ProcessInfo& p : left) {
    ProcessInfo now;
    while (read_stat(p.pid, &now) && now.state != 'Z' && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return left;
}

void reap_adopted(const std::function<bool(pid_t)>& keep) {
  for (;;) {
    siginfo_t info{};
    // Looks at the first child that ended without reaping it: it may be a worker.
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    if (keep(info.si_pid)) return;  // its owner reaps it, and the others wait behind it
    ::waitpid(info.si_pid, nullptr, WNOHANG);
  }
}

std::vector<ProcessInfo> end_adopted(const std::function<bool(pid_t)>& keep) {
  std::vector<ProcessInfo> killed;
  const pid_t self = ::getpid();
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  // Each death hands the dead process's own children over: look again until none is left.
  while (Clock::now() < deadline) {
    std::vector<ProcessInfo> children =
        processes_where([&](const ProcessInfo& p) { return p.ppid == self && !keep(p.pid); });
    if (children.empty()) break;
    for (const ProcessInfo& c : children) {
      if (c.state == 'Z') continue;
      ::kill(c.pid, SIGKILL);
      const bool again = std::any_of(killed.begin(), killed.end(),
                                     [&](const ProcessInfo& k) { return k.pid == c.pid; });
      if (!again) killed.push_back(c);
    }
    for (const ProcessInfo& c : children) {
      while (::waitpid(c.pid, nullptr, WNOHANG) == 0 && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return killed;
}

std::string describe(const std::vector<ProcessInfo>& processes) {
  std::string out;
  for (size_t i = 0; i < processes.size() && i < 8; ++i)
    out += str_cat(i ? ", " : "", processes[i].pid, " ", processes[i].comm);
  if (processes.size() > 8) out += str_cat(", and ", processes.size() - 8, " more");
  return out;
}

}  // namespace spmd::launcher
