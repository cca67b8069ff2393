// The machine's limits (see the header): two processes over a loopback TCP
// connection, and memcpy.
#include "bench/collectives/limits.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "runtime/error.h"

namespace spmd::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBuffer = size_t(64) << 20;   // what a collective's tensor would be
constexpr size_t kStream = size_t(512) << 20;  // bytes per bandwidth repetition
constexpr int kReps = 3;
constexpr int kPings = 2000;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A connected pair of loopback TCP sockets (TCP_NODELAY, as the backend sets);
// the first one's SO_SNDBUF set to `send_buffer` before it connects (0: the
// kernel's autotuning), as the backend's bootstrap does.
std::pair<int, int> loopback_pair(int send_buffer = 0) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  SPMD_CHECK(listener >= 0 && ::bind(listener, (sockaddr*)&addr, len) == 0 &&
                 ::listen(listener, 1) == 0 && ::getsockname(listener, (sockaddr*)&addr, &len) == 0,
             "spmd-bench --limits: cannot listen on loopback: ", std::strerror(errno));
  const int a = ::socket(AF_INET, SOCK_STREAM, 0);
  if (send_buffer > 0) ::setsockopt(a, SOL_SOCKET, SO_SNDBUF, &send_buffer, sizeof send_buffer);
  SPMD_CHECK(::connect(a, (sockaddr*)&addr, len) == 0,
             "spmd-bench --limits: cannot connect: ", std::strerror(errno));
  const int b = ::accept(listener, nullptr, nullptr);
  ::close(listener);
  int one = 1;
  ::setsockopt(a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return {a, b};
}

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    SPMD_CHECK(w > 0, "spmd-bench --limits: write failed: ", std::strerror(errno));
    p += w;
    n -= size_t(w);
  }
}

void read_all(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    SPMD_CHECK(r > 0, "spmd-bench --limits: read failed: ", r == 0 ? "EOF" : std::strerror(errno));
    p += r;
    n -= size_t(r);
  }
}

// Streams `total` bytes out of a 64 MiB buffer, in 4 MiB writes.
void stream_out(int fd, size_t total) {
  std::vector<char> buf(kBuffer, 1);
  for (size_t done = 0; done < total; done += 4 << 20) {
    write_all(fd, buf.data() + done % kBuffer, std::min<size_t>(4 << 20, total - done));
  }
}

// Reads `total` bytes into a 64 MiB buffer, in place order.
void stream_in(int fd, size_t total) {
  std::vector<char> buf(kBuffer, 0);
  for (size_t done = 0; done < total; done += 4 << 20) {
    read_all(fd, buf.data() + done % kBuffer, std::min<size_t>(4 << 20, total - done));
  }
}

// Runs child(fd) in a forked process on one end of a loopback connection and
// parent(fd) here on the other; returns the parent's seconds.
template <class Parent, class Child>
double across_processes(Parent parent, Child child, int send_buffer = 0) {
  auto [a, b] = loopback_pair(send_buffer);
  const pid_t pid = ::fork();
  SPMD_CHECK(pid >= 0, "spmd-bench --limits: fork failed: ", std::strerror(errno));
  if (pid == 0) {
    ::close(a);
    int code = 0;
    try {
      child(b);
    } catch (...) {
      code = 1;
    }
    ::_exit(code);
  }
  ::close(b);
  const auto start = Clock::now();
  parent(a);
  const double s = seconds_since(start);
  ::close(a);
  int status = 0;
  ::waitpid(pid, &status, 0);
  SPMD_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
             "spmd-bench --limits: the child failed");
  return s;
}

double cpu_seconds();

struct StreamFigures {
  double gbps = 0, sender_busy = 0, receiver_busy = 0;  // busy: CPU seconds / wall seconds
};

// One way: the parent sends, the child reads and acknowledges the last byte
// with the CPU time it used. Blocking calls sleep when they cannot move, so
// each side's CPU time says how busy its core was (on loopback the sender's
// system calls also run the receiving half of TCP).
StreamFigures one_way() {
  StreamFigures best;
  for (int rep = 0; rep < kReps; ++rep) {
    double sender_cpu = 0, receiver_cpu = 0;
    const double s = across_processes(
        [&](int fd) {
          const double cpu0 = cpu_seconds();
          stream_out(fd, kStream);
          sender_cpu = cpu_seconds() - cpu0;
          read_all(fd, reinterpret_cast<char*>(&receiver_cpu), sizeof receiver_cpu);
        },
        [&](int fd) {
          const double cpu0 = cpu_seconds();
          stream_in(fd, kStream);
          const double used = cpu_seconds() - cpu0;
          write_all(fd, reinterpret_cast<const char*>(&used), sizeof used);
        });
    const double gbps = double(kStream) / s / 1e9;
    if (gbps > best.gbps) best = {gbps, sender_cpu / s, receiver_cpu / s};
  }
  return best;
}

// --- One stream as the TCP backend moves it ------------------------------------------

// This process's CPU seconds (user + system) so far.
double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Moves `total` bytes through fd out of (or into) a `buffer`-byte buffer in
// 4 MiB non-blocking calls, spinning on EAGAIN, as the backend's Link does.
void spin_stream(int fd, size_t buffer, size_t total, bool out) {
  std::vector<char> buf(buffer, 1);
  for (size_t done = 0; done < total;) {
    const size_t at = done % buffer, n = std::min({size_t(4) << 20, buffer - at, total - done});
    const ssize_t r = out ? ::send(fd, buf.data() + at, n, MSG_DONTWAIT | MSG_NOSIGNAL)
                          : ::recv(fd, buf.data() + at, n, MSG_DONTWAIT);
    if (r > 0) done += size_t(r);
    SPMD_CHECK(r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR)),
               "spmd-bench --limits: stream failed: ", r == 0 ? "EOF" : std::strerror(errno));
  }
}

// One way, as the backend moves a broadcast between two ranks: a 256 KiB
// send buffer (tuning.h), non-blocking calls that spin (the backend spins
// before it sleeps), the root's data in `buffer` bytes that it sends again and
// again. The receiver acknowledges the last byte. 2 GiB a repetition: the
// stream speeds up over its first few hundred MiB (the kernel grows the
// receive window), and a collective's connections are long-lived.
double backend_stream_gbps(size_t buffer) {
  constexpr size_t kLong = size_t(2) << 30;
  double best = 1e30;
  for (int rep = 0; rep < kReps; ++rep) {
    best = std::min(best, across_processes(
                              [&](int fd) {
                                spin_stream(fd, buffer, kLong, true);
                                char ack;
                                read_all(fd, &ack, 1);
                              },
                              [&](int fd) {
                                spin_stream(fd, buffer, kLong, false);
                                write_all(fd, "k", 1);
                              },
                              256 << 10));
  }
  return double(kLong) / best / 1e9;
}

// Both ways at once: each process sends and receives kStream bytes (a thread
// each), as every rank of a ring does. Returns GB/s per direction.
double both_ways_gbps() {
  auto side = [](int fd) {
    std::thread sender([fd] { stream_out(fd, kStream); });
    stream_in(fd, kStream);
    sender.join();
  };
  double best = 1e30;
  for (int rep = 0; rep < kReps; ++rep) best = std::min(best, across_processes(side, side));
  return double(kStream) / best / 1e9;
}

enum class Wait { kBlocking, kPoll, kSpin };

// Waits until fd has 8 bytes, the given way, and reads them.
void wait_and_read(int fd, char* msg, Wait how) {
  if (how == Wait::kPoll) {
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, -1);
  }
  if (how == Wait::kSpin) {
    size_t got = 0;
    while (got < 8) {
      const ssize_t r = ::recv(fd, msg + got, 8 - got, MSG_DONTWAIT);
      if (r > 0) got += size_t(r);
      if (r == 0) SPMD_THROW(Error, "spmd-bench --limits: EOF");
    }
    return;
  }
  read_all(fd, msg, 8);
}

// Half the round trip of an 8-byte ping-pong, in microseconds.
double one_way_latency_us(Wait how) {
  auto ping = [how](int fd) {
    char msg[8] = {};
    for (int i = 0; i < kPings; ++i) {
      write_all(fd, msg, 8);
      wait_and_read(fd, msg, how);
    }
  };
  auto pong = [how](int fd) {
    char msg[8] = {};
    for (int i = 0; i < kPings; ++i) {
      wait_and_read(fd, msg, how);
      write_all(fd, msg, 8);
    }
  };
  double best = 1e30;
  for (int rep = 0; rep < kReps; ++rep) best = std::min(best, across_processes(ping, pong));
  return best / kPings / 2 * 1e6;
}

// memcpy between two 64 MiB buffers: bytes copied per second.
double memcpy_gbps() {
  std::vector<char> src(kBuffer, 1), dst(kBuffer, 0);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = Clock::now();
    std::memcpy(dst.data(), src.data(), kBuffer);
    best = std::min(best, seconds_since(start));
    src[size_t(rep)] = dst[size_t(rep) + 1];  // the copies are not dead code
  }
  return double(kBuffer) / best / 1e9;
}

}  // namespace

int print_limits(std::FILE* out) {
  try {
    std::fprintf(out, "# spmd-bench --limits: this machine's bounds (%u hardware threads)\n",
                 std::thread::hardware_concurrency());
    std::fprintf(out, "memcpy (64 MiB, 1 thread)             %8.2f GB/s\n", memcpy_gbps());
    const StreamFigures f = one_way();
    std::fprintf(out,
                 "loopback TCP, one way                 %8.2f GB/s (sender's core %.0f%% busy, "
                 "receiver's %.0f%%)\n",
                 f.gbps, 100 * f.sender_busy, 100 * f.receiver_busy);
    std::fprintf(out, "loopback TCP, both ways at once       %8.2f GB/s each way\n",
                 both_ways_gbps());
    for (size_t mib : {64, 4}) {
      std::fprintf(out, "one stream as the backend moves it, %2zu MiB buffers %6.2f GB/s\n", mib,
                   backend_stream_gbps(mib << 20));
    }
    std::fprintf(out, "8-byte one-way latency, blocking read %8.1f us\n",
                 one_way_latency_us(Wait::kBlocking));
    std::fprintf(out, "8-byte one-way latency, poll()        %8.1f us\n",
                 one_way_latency_us(Wait::kPoll));
    std::fprintf(out, "8-byte one-way latency, spinning      %8.1f us\n",
                 one_way_latency_us(Wait::kSpin));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

}  // namespace spmd::bench
