// The guardian: a small process that outlives the launcher by a moment, so
// that a launcher killed with SIGKILL still takes its workers' descendants
// with it.
//
// A worker asks for SIGKILL when the launcher dies (PR_SET_PDEATHSIG,
// worker_group.h), but children do not inherit that request: the worker's
// own children would live on, adopted by init, and nothing of the launcher
// is left to end them (descendants.h is what it does while it lives). So,
// before it starts any worker, the launcher forks the guardian and keeps the
// write end of a pipe whose read end only the guardian holds (close-on-exec:
// no worker inherits either end). It writes each worker's process group id
// as the worker starts, and the id negated once it has killed what was left
// of that group itself. When the pipe reads end-of-file, the launcher is
// gone, however it ended: the guardian sends SIGKILL to every group still
// listed, says so on stderr, and exits.
//
// The guardian runs in a session of its own, so a Ctrl-C or a signal sent to
// the launcher's process group does not reach it; it closes every other
// descriptor it inherited; and after fork it makes only async-signal-safe
// calls (the launcher may have threads). A group id cannot be reused while
// any process of the group is alive or unreaped, and the launcher withdraws
// an id only after it killed the group, so the guardian never signals a
// stranger's group.
//
// Not covered: a process that left its worker's group (setsid) outlives a
// launcher killed with SIGKILL. Only a cgroup holds every descendant whatever
// it does (systemd's KillMode=control-group), and spmdrun does not assume
// that one is delegated to it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace spmd::launcher {

class Guardian {
 public:
  // Forks the guardian, able to hold up to `capacity` groups at once. When
  // it cannot (no process left), says so and guards nothing.
  explicit Guardian(size_t capacity);
  // Closes the pipe, so the guardian ends whatever group is still listed
  // (none after an orderly end) and exits; waits a second at most for it.
  ~Guardian();
  Guardian(const Guardian&) = delete;
  Guardian& operator=(const Guardian&) = delete;

  // A worker's process group: killed by the guardian if the launcher dies.
  void watch(pid_t pgid);
  // The launcher killed what was left of the group: the guardian drops it.
  // REQUIRES: called after the group's SIGKILL, not before.
  void forget(pid_t pgid);

  pid_t pid() const { return pid_; }

 private:
  void send(int32_t message);

  std::vector<pid_t> groups_;  // the guardian's table, allocated before fork
  int fd_ = -1;                // the pipe's write end
  pid_t pid_ = -1;
};

}  // namespace spmd::launcher
