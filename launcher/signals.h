// The launcher's signals as a file descriptor. SIGINT, SIGTERM, SIGHUP, SIGQUIT
// (to forward to the workers) and SIGCHLD (a worker ended) are blocked and
// read from a signalfd, so the agent's one poll() loop sees them beside the
// workers' output, with no handler running at an arbitrary moment.
//
// Construct it first thing in main(), before any thread exists: threads
// inherit the blocked mask, so no thread receives these signals directly.
#pragma once

#include <stdexcept>
#include <vector>

namespace spmd::launcher {

// Thrown when a termination signal arrives while the agent is waiting
// (rendezvous, exit barrier); main() turns it into exit code 128 + signal.
struct Interrupted {
  int signal;
};

class SignalChannel {
 public:
  SignalChannel();
  ~SignalChannel();
  SignalChannel(const SignalChannel&) = delete;
  SignalChannel& operator=(const SignalChannel&) = delete;

  int fd() const { return fd_; }
  // Reads every signal queued now (never blocks): termination signals are
  // kept until taken, a SIGCHLD is only noted (the caller reaps anyway).
  void drain();
  // True when a termination signal is waiting to be taken.
  bool has_termination() const { return !pending_.empty(); }
  // The oldest termination signal not yet taken (0 when none).
  int take_termination();
  // Drains and throws Interrupted when a termination signal is waiting.
  void throw_if_interrupted();

 private:
  int fd_ = -1;
  std::vector<int> pending_;
};

}  // namespace spmd::launcher
