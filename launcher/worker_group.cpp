// Starting, watching and stopping the worker processes.
#include "launcher/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "launcher/descendants.h"
#include "runtime/error.h"
#include "runtime/logging.h"
#include "runtime/process.h"

namespace spmd::launcher {
namespace {

using Ms = std::chrono::milliseconds;

// Between fork and exec only async-signal-safe calls are allowed (the
// launcher may have a store thread): no allocation, no locks, no setenv.
[[noreturn]] void exec_worker(const char* path, char* const* argv, char* const* envp, int out_fd,
                              int err_fd, int exec_error_fd, pid_t launcher) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(127);  // the launcher died before prctl
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0) ::dup2(devnull, 0);
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  ::execve(path, argv, envp);
  int err = errno;
  (void)!::write(exec_error_fd, &err, sizeof err);
  ::_exit(127);
}

// Pointers into `strings`, null-terminated, as execve wants them.
std::vector<char*> c_array(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// The process group first; the pid alone when the worker left its group.
void signal_worker(pid_t pid, int sig) {
  if (::kill(-pid, sig) != 0) ::kill(pid, sig);
}

bool is_executable_file(const std::string& path) {
  return ::access(path.c_str(), X_OK) == 0 && std::filesystem::is_regular_file(path);
}

}  // namespace

WorkerCommand resolve_command(const std::string& program, const std::vector<std::string>& args) {
  WorkerCommand cmd;
  cmd.argv.push_back(program);
  cmd.argv.insert(cmd.argv.end(), args.begin(), args.end());
  if (program.find('/') != std::string::npos) {
    SPMD_CHECK(std::filesystem::exists(program), "program '", program, "' not found");
    SPMD_CHECK(is_executable_file(program), "program '", program, "' is not an executable file");
    cmd.path = program;
    return cmd;
  }
  const char* path_var = std::getenv("PATH");
  std::string dirs = path_var ? path_var : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  for (;;) {
    size_t colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon == std::string::npos ? colon : colon - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (is_executable_file(candidate)) {
      cmd.path = candidate;
      return cmd;
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  SPMD_THROW(InvalidArgument, "program '", program, "' not found in PATH");
}

// ---- starting ----

WorkerGroup::WorkerGroup(const WorkerCommand& command, std::vector<WorkerSetup> setups,
                         Guardian* guardian)
    : started_(std::chrono::system_clock::now()), guardian_(guardian) {
  workers_.reserve(setups.size());
  try {
    for (const WorkerSetup& s : setups) start(command, s);
  } catch (...) {  // a failed fork or pipe midway: no worker outlives the group, none a zombie
    for (Worker& w : workers_) signal_worker(w.pid, SIGKILL);
    for (Worker& w : workers_) {
      ::waitpid(w.pid, &w.status, 0);
      end_leftovers(w);
    }
    throw;
  }
}

void WorkerGroup::start(const WorkerCommand& command, const WorkerSetup& setup) {
  int out[2], err[2], exec_error[2];
  SPMD_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0 &&
                 ::pipe2(exec_error, O_CLOEXEC) == 0,
             "spmdrun: pipe failed: ", std::strerror(errno));
  std::vector<char*> argv = c_array(command.argv), envp = c_array(setup.env);
  pid_t launcher = ::getpid();
  pid_t pid = ::fork();
  const int fork_errno = errno;  // before the close() calls below can change it
  if (pid == 0)
    exec_worker(command.path.c_str(), argv.data(), envp.data(), out[1], err[1], exec_error[1],
                launcher);
  for (int fd : {out[1], err[1], exec_error[1]}) ::close(fd);
  net::Socket out_read(out[0]), err_read(err[0]), error_read(exec_error[0]);
  SPMD_CHECK(pid > 0, "spmdrun: cannot start rank ", setup.rank,
             ": fork failed: ", std::strerror(fork_errno),
             fork_errno == EAGAIN ? " (the process limit, ulimit -u, is reached)" : "");
  ::setpgid(pid, pid);  // also here, so the group exists before any signal is sent
  if (guardian_) guardian_->watch(pid);
  int exec_errno = 0;
  ssize_t k;
  do {
    k = ::read(error_read.fd(), &exec_errno, sizeof exec_errno);  // end-of-file: exec worked
  } while (k < 0 && errno == EINTR);
  if (k == static_cast<ssize_t>(sizeof exec_errno)) {
    ::waitpid(pid, nullptr, 0);
    if (guardian_) guardian_->forget(pid);  // the group died with its only process
    SPMD_THROW(Error, "cannot execute '", command.path, "': ", std::strerror(exec_errno));
  }
  Worker w;
  w.local_rank = setup.local_rank;
  w.rank = setup.rank;
  w.pid = pid;
  w.running = true;
  net::set_nonblocking(out_read.fd(), true);
  net::set_nonblocking(err_read.fd(), true);
  w.out = std::move(out_read);
  w.err = std::move(err_read);
  w.output = std::make_unique<WorkerOutput>(setup.rank, setup.stdout_route, setup.stderr_route, 10);
  workers_.push_back(std::move(w));
}

WorkerGroup::~WorkerGroup() {
  for (Worker& w : workers_)
    if (w.running) signal_worker(w.pid, SIGKILL);
  for (Worker& w : workers_) {
    if (!w.running) continue;
    ::waitpid(w.pid, &w.status, 0);
    w.running = false;
    end_leftovers(w);
  }
  end_adopted([this](pid_t pid) { return guardian_ && pid == guardian_->pid(); });
}

// ---- watching ----

void WorkerGroup::pump(std::chrono::milliseconds timeout, SignalChannel& signals) {
  std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
  std::vector<std::pair<Worker*, int>> owners;
  for (Worker& w : workers_) {
    if (w.out.valid()) fds.push_back({w.out.fd(), POLLIN, 0}), owners.push_back({&w, 1});
    if (w.err.valid()) fds.push_back({w.err.fd(), POLLIN, 0}), owners.push_back({&w, 2});
  }
  ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
  for (size_t i = 1; i < fds.size(); ++i)
    if (fds[i].revents) read_pipe(*owners[i - 1].first, owners[i - 1].second);
  signals.drain();
  reap();  // every turn, not only on SIGCHLD: several exits may share one signal
  reap_adopted([this](pid_t pid) { return is_running_worker(pid); });
}

void WorkerGroup::read_pipe(Worker& w, int stream) {
  net::Socket& fd = stream == 1 ? w.out : w.err;
  char buf[64 * 1024];
  for (int round = 0; round < 16; ++round) {  // bounded: one chatty worker cannot starve the rest
    ssize_t k = ::read(fd.fd(), buf, sizeof buf);
    if (k > 0) {
      w.output->feed(stream, buf, static_cast<size_t>(k));
    } else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
      w.output->finish(stream);
      fd.close();
      return;
    } else if (errno == EAGAIN) {
      return;
    }
  }
}

void WorkerGroup::reap() {
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = workers_[i];
    if (!w.running || ::waitpid(w.pid, &w.status, WNOHANG) != w.pid) continue;
    w.running = false;
    w.ended = std::chrono::system_clock::now();
    bool failed = !(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0);
    if (failed) failures_.push_back(i);
    SPMD_LOG_INFO("rank ", w.rank, " (pid ", w.pid, ") ended: ",
                  WIFEXITED(w.status) ? str_cat("exit code ", WEXITSTATUS(w.status))
                                      : str_cat("signal ", WTERMSIG(w.status)));
    end_leftovers(w);
    if (!all_exited()) continue;
    // The last worker ended: what they started outside their groups ends too.
    const std::vector<ProcessInfo> adopted =
        end_adopted([this](pid_t pid) { return guardian_ && pid == guardian_->pid(); });
    if (!adopted.empty())
      SPMD_LOG_WARN("every worker has ended, but ", adopted.size(),
                    " process(es) they started outside their process groups still ran (",
                    describe(adopted), "): killed (SIGKILL)");
  }
}

// The worker was reaped: what it left in its process group ends with it.
void WorkerGroup::end_leftovers(const Worker& w) {
  reap_adopted([this](pid_t pid) { return is_running_worker(pid); });  // not counted as left
  const std::vector<ProcessInfo> left = end_group(w.pid);
  if (guardian_) guardian_->forget(w.pid);  // after the SIGKILL, as forget() requires
  if (!left.empty())
    SPMD_LOG_WARN("rank ", w.rank, " (pid ", w.pid, ") ended and left ", left.size(),
                  " process(es) in its process group (", describe(left), "): killed (SIGKILL)");
}

bool WorkerGroup::is_running_worker(pid_t pid) const {
  for (const Worker& w : workers_)
    if (w.running && w.pid == pid) return true;
  return false;
}

std::optional<size_t> WorkerGroup::first_failure() const {
  if (failures_.empty()) return std::nullopt;
  return failures_.front();
}

bool WorkerGroup::all_exited() const {
  for (const Worker& w : workers_)
    if (w.running) return false;
  return true;
}

bool WorkerGroup::pipes_open() const {
  for (const Worker& w : workers_)
    if (w.out.valid() || w.err.valid()) return true;
  return false;
}

// ---- stopping ----

// A stopped worker (SIGSTOP, a debugger) would sit out the whole grace: it
// acts on no signal but SIGKILL, so it gets that at once.
void WorkerGroup::kill_stopped(int sig) {
  for (Worker& w : workers_) {
    if (!w.running || w.killed_stopped || !read_process_state(w.pid).stopped()) continue;
    SPMD_LOG_WARN("rank ", w.rank, " (pid ", w.pid, ") is stopped and cannot act on ",
                  signal_name(sig), ": SIGKILL");
    signal_worker(w.pid, SIGKILL);
    w.killed_stopped = true;
  }
}

void WorkerGroup::stop(int sig, std::chrono::milliseconds grace, SignalChannel& signals) {
  if (sig != SIGKILL) kill_stopped(sig);
  for (Worker& w : workers_)
    if (w.running && !w.killed_stopped) signal_worker(w.pid, sig);
  const auto begun = std::chrono::steady_clock::now();
  auto deadline = begun + grace;
  while (!all_exited() && std::chrono::steady_clock::now() < deadline) {
    if (sig != SIGKILL) kill_stopped(sig);
    auto left = std::chrono::duration_cast<Ms>(deadline - std::chrono::steady_clock::now());
    pump(std::min(left, Ms(100)), signals);
    if (signals.has_termination()) break;  // asked (again) to stop: no more grace
  }
  // The time actually waited: a second termination signal cuts the grace short.
  const auto waited = std::chrono::duration_cast<Ms>(std::chrono::steady_clock::now() - begun);
  for (Worker& w : workers_) {
    if (!w.running) continue;
    SPMD_LOG_WARN("rank ", w.rank, " (pid ", w.pid, ") still running after ", waited.count(), " ms",
                  waited < grace ? " (asked again to stop)" : "", ": SIGKILL");
    signal_worker(w.pid, SIGKILL);
  }
  while (!all_exited()) pump(Ms(50), signals);
  drain_output(Ms(1000), signals);
}

void WorkerGroup::drain_output(std::chrono::milliseconds limit, SignalChannel& signals) {
  // A worker's own children may hold its pipes open: wait for them a moment only.
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (pipes_open() && std::chrono::steady_clock::now() < deadline) pump(Ms(20), signals);
  for (Worker& w : workers_) {
    if (w.out.valid()) w.output->finish(1), w.out.close();
    if (w.err.valid()) w.output->finish(2), w.err.close();
  }
}

}  // namespace spmd::launcher
