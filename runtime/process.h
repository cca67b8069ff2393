// Child processes as spawn() and spmdrun see them: how one ended, said the
// way a person reads it, what the kernel says of a live one, and stopping a
// set of them politely, then firmly.
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

// What the kernel says of a live process (/proc/<pid>/stat): its state
// letter (R running, S asleep, D in uninterruptible sleep, T stopped by a
// signal, t stopped by a debugger, Z exited and not reaped) and the CPU time
// its threads have used, user and system. state is 0 when the file cannot
// be read: the process is gone, or lives on another host.
struct ProcessState {
  char state = 0;
  double cpu_s = 0;
  // A stopped process acts on no signal but SIGKILL (and SIGCONT).
  bool stopped() const { return state == 'T' || state == 't'; }
};
ProcessState read_process_state(pid_t pid);
// "stopped (state T: SIGSTOP, or a debugger)", "asleep (state S)", ...;
// "-" for state 0.
std::string describe_process_state(char state);

// Sends SIGTERM to every pid (each a process group leader when as_groups), waits
// up to `grace` for them to end, then sends SIGKILL to the rest, and reaps
// them all. A stopped process cannot act on SIGTERM: it gets SIGKILL at once. Statuses of the
// reaped are written to `statuses` (same order as pids; untouched for pids already reaped, given as
// <= 0).
void terminate_and_reap(const std::vector<pid_t>& pids, std::chrono::milliseconds grace,
                        bool as_groups, std::vector<int>* statuses = nullptr);

}  // namespace spmd
