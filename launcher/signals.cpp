// SignalChannel: block the signals, read them from a signalfd.
#include "launcher/signals.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "runtime/error.h"

namespace spmd::launcher {
namespace {
sigset_t watched() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&set, sig);
  return set;
}
}  // namespace

SignalChannel::SignalChannel() {
  sigset_t set = watched();
  SPMD_CHECK(::sigprocmask(SIG_BLOCK, &set, nullptr) == 0, "spmdrun: sigprocmask failed");
  fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  SPMD_CHECK(fd_ >= 0, "spmdrun: signalfd failed");
  // Writing to a console or pipe that closed must not kill the launcher (and
  // with it, through the parent-death signal, every worker).
  ::signal(SIGPIPE, SIG_IGN);
}

SignalChannel::~SignalChannel() { ::close(fd_); }

void SignalChannel::drain() {
  signalfd_siginfo info;
  while (::read(fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig != SIGCHLD) pending_.push_back(sig);
  }
}

int SignalChannel::take_termination() {
  if (pending_.empty()) return 0;
  int sig = pending_.front();
  pending_.erase(pending_.begin());
  return sig;
}

void SignalChannel::throw_if_interrupted() {
  drain();
  if (has_termination()) throw Interrupted{take_termination()};
}

}  // namespace spmd::launcher
