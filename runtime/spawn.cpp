// spawn(): fork the children, give each its rank through the environment,
// then watch them. Each child has a pipe back to the parent for the message
// of an exception it threw; the parent sleeps in poll() on those pipes (a
// pipe reaches end-of-file when its child exits) and reaps with waitpid().
#include "runtime/spawn.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <vector>

#include "runtime/logging.h"
#include "runtime/process.h"
#include "runtime/rendezvous.h"
#include "runtime/socket.h"
#include "runtime/trace.h"

namespace spmd {
namespace {

struct Child {
  int rank = 0;
  pid_t pid = -1;
  net::Socket error_pipe;  // read end; the child writes its exception message
  std::string message;
  bool reaped = false;
  int status = 0;
};

void set_env(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

// A rank starts with default signal handling, as a fresh process would: the
// parent's handlers (a test framework's, say) are not the rank's. Ignored
// signals stay ignored, as across exec().
void reset_signals() {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction sa {};
    if (::sigaction(sig, nullptr, &sa) != 0) continue;
    if (sa.sa_handler != SIG_IGN && sa.sa_handler != SIG_DFL) ::signal(sig, SIG_DFL);
  }
}

// The child's whole life: environment, fn, exit. Never returns.
[[noreturn]] void run_child(int rank, int nprocs, pid_t parent, const SpawnOptions& options,
                            int listen_fd, int error_fd, const std::function<void(int)>& fn) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);     // die with the parent, never orphaned
  if (::getppid() != parent) ::_exit(1);  // the parent died before prctl took effect
  reset_signals();
  set_env("RANK", std::to_string(rank));
  set_env("LOCAL_RANK", std::to_string(rank));
  set_env("WORLD_SIZE", std::to_string(nprocs));
  set_env("LOCAL_WORLD_SIZE", std::to_string(nprocs));
  set_env("MASTER_ADDR", options.master_addr);
  set_env("MASTER_PORT", std::to_string(net::local_port(listen_fd)));
  ::unsetenv("SPMD_AGENT_STORE");  // the parent may itself run under spmdrun
  if (rank == 0) {
    set_env(kStoreListenFdVar, std::to_string(listen_fd));
  } else {
    ::close(listen_fd);
  }
  set_log_rank(rank);
  trace_start_child(rank);
  int code = 0;
  std::string message;
  try {
    fn(rank);
  } catch (const std::exception& e) {
    message = e.what();
    code = 1;
  } catch (...) {
    message = "an exception that is not a std::exception";
    code = 1;
  }
  if (code != 0) {
    std::string line = str_cat("[rank ", rank, "] spawn: ", message, "\n");
    (void)!::write(2, line.data(), line.size());
    (void)!::write(error_fd, message.data(), message.size());
  }
  trace_flush();
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::_exit(code);  // not exit(): the parent's atexit handlers and statics are not ours
}

// Reads whatever the child wrote; closes the pipe at end-of-file.
void drain(Child& c) {
  char buf[4096];
  for (;;) {
    ssize_t k = ::read(c.error_pipe.fd(), buf, sizeof buf);
    if (k > 0) {
      c.message.append(buf, static_cast<size_t>(k));
    } else if (k == 0) {
      c.error_pipe.close();
      return;
    } else {
      return;  // EAGAIN: more may come
    }
  }
}

// Sleeps until a child writes or exits (at most 50 ms), then reaps the ended.
// Returns the index of the first child that failed in this turn, or -1.
int watch_once(std::vector<Child>& children, net::Deadline deadline) {
  std::vector<pollfd> fds;
  std::vector<Child*> owners;
  for (Child& c : children) {
    if (!c.error_pipe.valid()) continue;
    fds.push_back({c.error_pipe.fd(), POLLIN, 0});
    owners.push_back(&c);
  }
  int ms = std::min(net::poll_timeout_ms(deadline), 50);
  ::poll(fds.data(), fds.size(), ms);
  for (size_t i = 0; i < fds.size(); ++i)
    if (fds[i].revents) drain(*owners[i]);
  int failed = -1;
  for (size_t i = 0; i < children.size(); ++i) {
    Child& c = children[i];
    if (c.reaped || ::waitpid(c.pid, &c.status, WNOHANG) != c.pid) continue;
    c.reaped = true;
    if (c.error_pipe.valid()) drain(c);
    if (failed < 0 && wait_status_failed(c.status)) failed = static_cast<int>(i);
  }
  return failed;
}

// Stops every child still running and collects what they wrote.
void stop_all(std::vector<Child>& children, std::chrono::milliseconds grace) {
  std::vector<pid_t> pids;
  std::vector<int> statuses(children.size());
  for (Child& c : children) pids.push_back(c.reaped ? -1 : c.pid);
  terminate_and_reap(pids, grace, false, &statuses);
  for (size_t i = 0; i < children.size(); ++i) {
    if (children[i].error_pipe.valid()) drain(children[i]);
    if (!children[i].reaped) children[i].status = statuses[i];
  }
}

[[noreturn]] void throw_failure(const Child& c) {
  std::string what = str_cat("spawn: rank ", c.rank, " ", describe_wait_status(c.status));
  if (!c.message.empty()) what += ": " + c.message;
  throw ProcessFailedError(what, c.rank, c.status);
}

}  // namespace

void spawn(int nprocs, const std::function<void(int rank)>& fn, const SpawnOptions& options) {
  SPMD_CHECK(nprocs >= 1, "spawn: nprocs is ", nprocs, "; it must be at least 1");
  net::Socket listener = net::listen_tcp("", 0);
  std::fflush(nullptr);  // or the children would print the parent's buffered output again
  pid_t parent = ::getpid();
  std::vector<Child> children(static_cast<size_t>(nprocs));
  for (int rank = 0; rank < nprocs; ++rank) {
    int fds[2];
    SPMD_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "spawn: pipe failed");
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      run_child(rank, nprocs, parent, options, listener.fd(), fds[1], fn);
    }
    ::close(fds[1]);
    Child& c = children[static_cast<size_t>(rank)];
    c.rank = rank;
    c.error_pipe = net::Socket(fds[0]);
    net::set_nonblocking(fds[0], true);
    if (pid < 0) {
      stop_all(children, options.grace);
      SPMD_THROW(Error, "spawn: fork failed for rank ", rank);
    }
    c.pid = pid;
  }
  listener.close();  // rank 0 holds its own copy
  net::Deadline deadline = net::Clock::now() + options.timeout;
  for (;;) {
    int failed = watch_once(children, deadline);
    if (failed >= 0) {
      SPMD_LOG_INFO("spawn: rank ", failed, " failed; stopping the others");
      stop_all(children, options.grace);
      throw_failure(children[static_cast<size_t>(failed)]);
    }
    std::string running;
    for (const Child& c : children)
      if (!c.reaped) running += str_cat(running.empty() ? "" : ", ", c.rank);
    if (running.empty()) return;
    if (net::Clock::now() >= deadline) {
      stop_all(children, options.grace);
      SPMD_THROW(TimeoutError, "spawn: rank(s) ", running, " still running after ",
                 options.timeout.count(), " ms; stopped them");
    }
  }
}

}  // namespace spmd
