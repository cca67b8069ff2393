// Child processes as spawn() and spmdrun see them: how one ended, said the
// way a person reads it, and stopping a set of them politely, then firmly.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace spmd {

// "SIGKILL" for 9; "signal 77" for a number without a name.
std::string signal_name(int sig);

// How a waitpid() status ended: "exited with code 3", "was killed by signal 9
// (SIGKILL)", with "(core dumped)" when so.
std::string describe_wait_status(int status);

// True when the status is anything but a normal exit with code 0.
bool wait_status_failed(int status);

// Sends SIGTERM to every pid (each a process group leader when as_groups), waits
// up to `grace` for them to end, then sends SIGKILL to the rest, and reaps
// them all. Statuses of the reaped are written to `statuses` (same order as
// pids; untouched for pids already reaped, given as <= 0).
void terminate_and_reap(const std::vector<pid_t>& pids, std::chrono::milliseconds grace,
                        bool as_groups, std::vector<int>* statuses = nullptr);

}  // namespace spmd
