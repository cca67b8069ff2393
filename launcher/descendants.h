// What the workers leave behind, and how the launcher ends it while it lives.
//
// Each worker leads a process group of its own (worker_group.h), and what it
// starts stays in that group unless it leaves on purpose (setsid, setpgid).
// The launcher is a child subreaper (prctl PR_SET_CHILD_SUBREAPER): a process
// whose parent dies is re-parented to the launcher instead of to init, so
// every orphan of a worker, even one that left the group, becomes the
// launcher's child, as under systemd or a container's init. From that:
//   - when a worker is reaped, what is left of its group is killed
//     (end_group): the worker's descendants end with it;
//   - adopted processes that exit are reaped (reap_adopted), so none lingers
//     as a zombie;
//   - once every worker has ended, adopted processes still running (those
//     that left their group) are killed (end_adopted).
// What happens when the launcher itself is killed with SIGKILL is the
// guardian's part (guardian.h). Processes are found by reading /proc.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace spmd::launcher {

// A process as /proc/<pid>/stat shows it.
struct ProcessInfo {
  pid_t pid = 0, ppid = 0, pgrp = 0;
  char state = '?';  // 'Z' for a zombie
  std::string comm;  // the program's name, as ps shows it
};

// Makes this process a child subreaper. Returns false (and logs why) when the
// kernel refuses.
bool become_subreaper();

// Kills (SIGKILL) what is left of the process group `pgid`, waits (a second
// at most) until those it saw are dead, and returns them.
std::vector<ProcessInfo> end_group(pid_t pgid);

// Reaps the adopted children that have exited, leaving alone those for which
// `keep` is true (the workers, which their owner reaps). Never blocks.
void reap_adopted(const std::function<bool(pid_t)>& keep);

// Kills every child of this process for which `keep` is false, waits for each
// (a second at most in all), and does so again for the children their deaths
// hand over, until none is left. Returns the processes killed.
std::vector<ProcessInfo> end_adopted(const std::function<bool(pid_t)>& keep);

// "4250 sleep, 4251 sh": for messages.
std::string describe(const std::vector<ProcessInfo>& processes);

}  // namespace spmd::launcher
