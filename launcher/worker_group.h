// The worker processes of one node, started together and stopped together.
//
// Each worker is fork()ed and exec()s the user's program with its own
// environment. Between fork and exec the child, in this order:
//   - becomes the leader of a process group of its own, so a signal to the
//     group reaches whatever the worker starts in turn;
//   - asks for SIGKILL when the launcher dies (prctl PR_SET_PDEATHSIG), and
//     checks the launcher has not died already: no worker outlives its
//     launcher, even one killed with SIGKILL;
//   - unblocks every signal and restores SIGPIPE's default;
//   - takes /dev/null as stdin and two pipes to the launcher as stdout/stderr.
// An exec that fails is reported through a close-on-exec pipe, so "no such
// program" is an error of the launcher, not a mysterious exit code 127.
//
// Nothing a worker starts outlives it: when a worker is reaped, what is left
// of its process group is killed, and once every worker has ended, so is
// anything they started outside their groups that the launcher adopted
// (descendants.h). The guardian, when given, is told of each group, for the
// case of a launcher killed with SIGKILL (guardian.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher/guardian.h"
#include "launcher/signals.h"
#include "launcher/worker_output.h"
#include "runtime/socket.h"

namespace spmd::launcher {

// The program as the user named it, and the file that will be executed.
struct WorkerCommand {
  std::string path;               // resolved through PATH
  std::vector<std::string> argv;  // argv[0] as the user typed it
};

// Resolves `program` as execvp would (PATH unless it has a '/'). Throws
// InvalidArgument when it does not exist or is not executable.
WorkerCommand resolve_command(const std::string& program, const std::vector<std::string>& args);

struct WorkerSetup {
  int local_rank = 0;
  int rank = 0;
  std::vector<std::string> env;  // "NAME=value", the worker's whole environment
  OutputRoute stdout_route, stderr_route;
};

struct Worker {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;  // waitpid() status once reaped
  std::chrono::system_clock::time_point ended;
  net::Socket out, err;  // read ends of the output pipes, until end-of-file
  std::unique_ptr<WorkerOutput> output;
  bool killed_stopped = false;  // stop() found it stopped and sent SIGKILL
};

class WorkerGroup {
 public:
  // Starts one worker per setup. Throws Error when a worker cannot be
  // started (the ones already started are killed). `guardian` may be null.
  WorkerGroup(const WorkerCommand& command, std::vector<WorkerSetup> setups,
              Guardian* guardian = nullptr);
  // Kills and reaps any worker still running (a safety net: stop() is the
  // orderly way).
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Sleeps in poll() up to `timeout` for output, a signal or an exit; routes
  // the output and reaps the workers that ended. Signals the launcher
  // received meanwhile wait in `signals`.
  void pump(std::chrono::milliseconds timeout, SignalChannel& signals);

  // The first worker that failed (in the order they were reaped), if any.
  std::optional<size_t> first_failure() const;
  bool all_exited() const;

  // Sends `sig` to every running worker's process group, keeps routing
  // output while they end, and after `grace` sends SIGKILL to the rest (at
  // once if the launcher gets another termination signal meanwhile). A
  // worker found stopped (SIGSTOP, a debugger) gets SIGKILL at once: it
  // cannot act on `sig`. Returns when all are reaped and their output is read.
  void stop(int sig, std::chrono::milliseconds grace, SignalChannel& signals);
  // Reads what is left in the pipes of workers that all ended.
  void drain_output(std::chrono::milliseconds limit, SignalChannel& signals);

  const std::vector<Worker>& workers() const { return workers_; }
  std::chrono::system_clock::time_point started() const { return started_; }

 private:
  void start(const WorkerCommand& command, const WorkerSetup& setup);
  void read_pipe(Worker& w, int stream);
  void reap();
  void end_leftovers(const Worker& w);
  bool is_running_worker(pid_t pid) const;
  bool pipes_open() const;
  void kill_stopped(int sig);

  std::vector<Worker> workers_;
  std::vector<size_t> failures_;  // indices into workers_, in reaping order
  std::chrono::system_clock::time_point started_;
  Guardian* guardian_ = nullptr;
};

}  // namespace spmd::launcher
