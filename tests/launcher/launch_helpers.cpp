// Test helpers for spmdrun: start it, read its output, wait with deadlines.
#include "launch_helpers.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/socket.h"

extern char** environ;

namespace spmd::test {

std::string spmdrun_path() { return SPMDRUN_PATH; }
std::string worker_path() { return SPMD_TEST_WORKER_PATH; }

LauncherProcess::LauncherProcess(const std::vector<std::string>& args,
                                 const std::vector<std::string>& extra_env,
                                 const std::vector<std::string>& unset_env) {
  std::vector<std::string> argv{spmdrun_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string var = *e, name = var.substr(0, var.find('='));
    bool drop = false;
    for (const std::string& u : unset_env) drop |= name == u;
    if (!drop) env.push_back(var);
  }
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> cargv, cenv;
  for (auto& a : argv) cargv.push_back(a.data());
  for (auto& e : env) cenv.push_back(e.data());
  cargv.push_back(nullptr);
  cenv.push_back(nullptr);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe");
  pid_ = ::fork();
  if (pid_ == 0) {
    // A fresh signal state: the test framework's handlers are not the launcher's.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig : {SIGINT, SIGTERM, SIGSEGV, SIGABRT, SIGPIPE}) ::signal(sig, SIG_DFL);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execve(argv[0].c_str(), cargv.data(), cenv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
}

LauncherProcess::~LauncherProcess() {
  if (!exited_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

void LauncherProcess::read_some(int timeout_ms) {
  pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
  int n = ::poll(fds, 2, timeout_ms);
  if (n <= 0) return;
  char buf[65536];
  for (int i = 0; i < 2; ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
    ssize_t k = ::read(fds[i].fd, buf, sizeof buf);
    if (k > 0) (i == 0 ? out_ : err_).append(buf, static_cast<size_t>(k));
    if (k == 0) {  // end of file: stop polling this one
      ::close(fds[i].fd);
      (i == 0 ? out_fd_ : err_fd_) = -1;
    }
  }
}

bool LauncherProcess::wait_for_output(const std::string& text, std::chrono::milliseconds timeout,
                                      int times) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (count(out_ + err_, text) < times) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (out_fd_ < 0 && err_fd_ < 0) return false;
    read_some(50);
  }
  return true;
}

bool LauncherProcess::wait_exit(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!exited_) {
    if (::waitpid(pid_, &status_, WNOHANG) == pid_) exited_ = true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (out_fd_ >= 0 || err_fd_ >= 0) {
      read_some(20);
    } else if (!exited_) {
      std::this_thread::sleep_for(10ms);
    }
  }
  while (out_fd_ >= 0 || err_fd_ >= 0) read_some(100);  // the rest of the output
  return true;
}

int LauncherProcess::exit_code() const {
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  return 128 + WTERMSIG(status_);
}

void LauncherProcess::send_signal(int sig) { ::kill(pid_, sig); }

RunResult run_spmdrun(const std::vector<std::string>& args, std::chrono::milliseconds timeout,
                      const std::vector<std::string>& extra_env,
                      const std::vector<std::string>& unset_env) {
  auto t0 = std::chrono::steady_clock::now();
  LauncherProcess p(args, extra_env, unset_env);
  if (!p.wait_exit(timeout))
    throw std::runtime_error("spmdrun ran past the test's timeout; output so far:\n" + p.all());
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {p.exit_code(), p.out(), p.err(), s};
}

std::vector<pid_t> processes_with_tag(const std::string& tag) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (!proc) return out;
  while (dirent* d = ::readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(d->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    std::ifstream in(std::string("/proc/") + d->d_name + "/cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(tag) != std::string::npos) out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return out;
}

bool wait_until_gone(const std::string& tag, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!processes_with_tag(tag).empty()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

std::string unique_tag() {
  static std::atomic<int> n{0};
  return "spmdtag-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

int free_port() {
  net::Socket s = net::listen_tcp("", 0);
  return net::local_port(s.fd());
}

int count(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + needle.size()))
    ++n;
  return n;
}

std::string line_after(const std::string& text, const std::string& prefix) {
  size_t at = text.find(prefix);
  if (at == std::string::npos) return "";
  at += prefix.size();
  return text.substr(at, text.find('\n', at) - at);
}

}  // namespace spmd::test
