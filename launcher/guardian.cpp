// The guardian process and the launcher's end of its pipe.
#include "launcher/guardian.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "runtime/error.h"
#include "runtime/logging.h"

namespace spmd::launcher {
namespace {

// Closes every descriptor from `first` on but `keep`.
void close_all_but(int first, int keep) {
  const bool below = keep <= first || ::close_range(first, keep - 1, 0) == 0;
  if (below && ::close_range(keep + 1, ~0U, 0) == 0) return;
  rlimit lim{};  // close_range is missing (a kernel before 5.9): one by one
  const int max = ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < 65536
                      ? static_cast<int>(lim.rlim_cur)
                      : 65536;
  for (int fd = first; fd < max; ++fd)
    if (fd != keep) ::close(fd);
}

// "N" into buf (no allocation after fork); returns the length.
int format_count(size_t n, char* buf) {
  char digits[24];
  int k = 0;
  do digits[k++] = static_cast<char>('0' + n % 10);
  while ((n /= 10) > 0);
  for (int i = 0; i < k; ++i) buf[i] = digits[k - 1 - i];
  return k;
}

// The guardian's life: read the table's changes until end-of-file, then kill
// what is listed. Only async-signal-safe calls: the launcher may have threads.
[[noreturn]] void guard(int fd, pid_t* groups, size_t capacity) {
  ::setsid();  // out of the launcher's session and process group
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  int devnull = ::open("/dev/null", O_RDWR);
  if (devnull >= 0) ::dup2(devnull, 0), ::dup2(devnull, 1);
  close_all_but(3, fd);  // stderr stays, for the one message below
  size_t n = 0;
  for (;;) {
    int32_t message = 0;
    const ssize_t k = ::read(fd, &message, sizeof message);  // writes of 4 bytes are atomic
    if (k < 0 && errno == EINTR) continue;
    if (k != static_cast<ssize_t>(sizeof message)) break;  // end-of-file: the launcher is gone
    if (message > 0 && n < capacity) {
      groups[n++] = message;
    } else if (message < 0) {
      for (size_t i = 0; i < n; ++i)
        if (groups[i] == -message) groups[i] = groups[--n];
    }
  }
  size_t killed = 0;
  for (size_t i = 0; i < n; ++i) killed += ::kill(-groups[i], SIGKILL) == 0;
  if (killed > 0) {
    char line[200] = "spmdrun: the launcher is gone; its guardian killed (SIGKILL) ";
    int len = static_cast<int>(std::strlen(line));
    len += format_count(killed, line + len);
    const char* rest = " worker process group(s) and what was left in them\n";
    std::memcpy(line + len, rest, std::strlen(rest));
    (void)!::write(2, line, len + std::strlen(rest));
  }
  ::_exit(0);
}

}  // namespace

Guardian::Guardian(size_t capacity) : groups_(capacity) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    SPMD_LOG_WARN("no guardian (pipe: ", std::strerror(errno),
                  "): if the launcher is killed with SIGKILL, what its workers started lives on");
    return;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[1]);
    guard(fds[0], groups_.data(), groups_.size());
  }
  ::close(fds[0]);
  if (pid < 0) {
    SPMD_LOG_WARN("no guardian (fork: ", std::strerror(errno),
                  "): if the launcher is killed with SIGKILL, what its workers started lives on");
    ::close(fds[1]);
    return;
  }
  fd_ = fds[1];
  pid_ = pid;
}

Guardian::~Guardian() {
  if (fd_ < 0) return;
  ::close(fd_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (::waitpid(pid_, nullptr, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void Guardian::watch(pid_t pgid) { send(static_cast<int32_t>(pgid)); }

void Guardian::forget(pid_t pgid) { send(-static_cast<int32_t>(pgid)); }

void Guardian::send(int32_t message) {
  if (fd_ < 0) return;
  ssize_t k;
  do {
    k = ::write(fd_, &message, sizeof message);
  } while (k < 0 && errno == EINTR);
  if (k == static_cast<ssize_t>(sizeof message)) return;
  SPMD_LOG_WARN("the guardian is gone (", std::strerror(errno),
                "): if the launcher is killed with SIGKILL, what its workers started lives on");
  ::close(fd_);
  fd_ = -1;
}

}  // namespace spmd::launcher
