// 00_threads_vs_processes: the two ways to run parts of a job at once (chapter
// 16.1). One task, a sum cut into parts, runs sequentially, then on threads,
// then on processes, each timed. Then what separates the two: threads share
// one memory (a counter they all change), a forked process gets its own copy
// of it (each child changes only its own); a thread is cheaper to start than
// a process, though waking either costs about the same; a process that
// crashes takes nothing else down.
//
//   00_threads_vs_processes --parts 2
//
// Processes are made with fork() here, to show what happens underneath;
// spawn() (runtime/spawn.h, example 02) is the same fork with each child told
// its rank, and the processes of a real job talk through a store and a
// communicator rather than the pipe used below.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

#include "runtime/error.h"
#include "runtime/flag_checks.h"
#include "runtime/process.h"

using namespace spmd;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The task: part `p` of `parts` of the sum of 1/k^2 for k = 1..n (-> pi^2/6).
double partial_sum(int64_t n, int p, int parts) {
  double s = 0;
  for (int64_t k = 1 + n * p / parts; k <= n * (p + 1) / parts; ++k) s += 1.0 / double(k * k);
  return s;
}

// A child process that runs fn and sends back the number it returns: the
// child's memory is its own, so the only way back is a message (a pipe here).
struct Child {
  pid_t pid;
  int fd;  // the read end of its pipe
};
Child start_child(const std::function<double()>& fn) {
  int fds[2];
  SPMD_CHECK(::pipe(fds) == 0, "pipe failed");
  const pid_t pid = ::fork();
  SPMD_CHECK(pid >= 0, "fork failed");
  if (pid == 0) {  // the child: a copy of the parent's memory at this instant
    ::close(fds[0]);
    try {
      const double v = fn();
      ::_exit(::write(fds[1], &v, sizeof v) == ssize_t(sizeof v) ? 0 : 1);
    } catch (...) {
      ::_exit(1);  // _exit: leave without running the parent's cleanup
    }
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}
double join_child(const Child& c) {
  double v = 0;
  const bool got = ::read(c.fd, &v, sizeof v) == ssize_t(sizeof v);
  ::close(c.fd);
  int status = 0;
  ::waitpid(c.pid, &status, 0);
  SPMD_CHECK(got && !wait_status_failed(status), "child ", c.pid, " ",
             describe_wait_status(status));
  return v;
}

// Runs fn(w) for w = 0..workers-1 at once and returns what each returned. On
// threads, every fn sees one memory, and each writes its own slot of the
// result; on processes, each sees its own copy, and sends its result back.
std::vector<double> run_workers(bool processes, int workers, const std::function<double(int)>& fn) {
  std::vector<double> result(static_cast<size_t>(workers));
  if (!processes) {
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) threads.emplace_back([&, w] { result[size_t(w)] = fn(w); });
    for (auto& t : threads) t.join();
  } else {
    std::vector<Child> children;
    for (int w = 0; w < workers; ++w) children.push_back(start_child([&, w] { return fn(w); }));
    for (int w = 0; w < workers; ++w) result[size_t(w)] = join_child(children[size_t(w)]);
  }
  return result;
}

// 1. The task three ways. Each adds the partial sums in part order, so all three
// must give the same bits.
void time_the_task(int64_t n, int parts) {
  std::printf("the sum of 1/k^2 for k = 1..%lld in %d parts, on %u cores:\n", (long long)n, parts,
              std::thread::hardware_concurrency());
  auto part = [&](int p) { return partial_sum(n, p, parts); };
  const char* ways[] = {"sequential", "threads", "processes"};
  double first_time = 0, first_sum = 0;
  for (int way = 0; way < 3; ++way) {
    const auto t0 = Clock::now();
    double s = 0;
    if (way == 0) {
      for (int p = 0; p < parts; ++p) s += part(p);  // one after the other
    } else {
      for (double v : run_workers(/*processes=*/way == 2, parts, part)) s += v;
    }
    const double t = seconds_since(t0);
    if (way == 0) first_time = t, first_sum = s;
    std::printf("  %-11s %6.3f s  sum %.15f  speedup %.2f%s\n", ways[way], t, s, first_time / t,
                s == first_sum ? "" : "  (NOT the sequential sum)");
  }
  std::printf("  sqrt(6 sum) = %.9f (pi is %.9f)\n", std::sqrt(6 * first_sum), M_PI);
}

// 2. The same code changes one counter on every worker. Threads change the same
// one (an atomic: a plain ++ from two threads at once is a data race and loses
// increments); each forked child changes its own copy, and the parent's stays 0.
void shared_counter(int workers, int increments) {
  std::atomic<int64_t> counter{0};
  auto count = [&](int) {
    for (int i = 0; i < increments; ++i) counter.fetch_add(1);
    return double(counter.load());
  };
  std::printf("a counter, %d workers x %d increments each:\n", workers, increments);
  run_workers(false, workers, count);
  std::printf("  threads    the counter is %lld: one memory, every increment seen by all\n",
              (long long)counter.load());
  counter = 0;
  std::printf("  processes  each child's counter is");
  for (double v : run_workers(true, workers, count)) std::printf(" %.0f", v);
  std::printf(", the parent's %lld: each has its own copy\n", (long long)counter.load());
}

// 3. What starting and waking cost. Start: run one worker that does nothing.
// Round trip: worker 0 writes a byte into a pipe; worker 1, asleep in read(),
// wakes and answers on a second pipe, which wakes worker 0.
double round_trip_us(bool processes, int rounds) {
  int ping[2], back[2];
  SPMD_CHECK(::pipe(ping) == 0 && ::pipe(back) == 0, "pipe failed");
  auto side = [&](int w) {
    const auto t0 = Clock::now();
    char b = 0;
    for (int i = 0; i < rounds; ++i) {
      const bool ok = w == 0 ? ::write(ping[1], &b, 1) == 1 && ::read(back[0], &b, 1) == 1
                             : ::read(ping[0], &b, 1) == 1 && ::write(back[1], &b, 1) == 1;
      SPMD_CHECK(ok, "round trip: a pipe failed");
    }
    return seconds_since(t0) * 1e6 / rounds;
  };
  const double us = run_workers(processes, 2, side)[0];
  for (int fd : {ping[0], ping[1], back[0], back[1]}) ::close(fd);
  return us;
}
void start_and_switch_cost(int starts, int rounds) {
  double start_us[2], trip_us[2];
  for (int processes : {0, 1}) {
    const auto t0 = Clock::now();
    for (int i = 0; i < starts; ++i) run_workers(processes, 1, [](int) { return 0.0; });
    start_us[processes] = seconds_since(t0) * 1e6 / starts;
    trip_us[processes] = round_trip_us(processes, rounds);
  }
  std::printf("what each costs (start + join: the mean of %d; round trip: of %d):\n", starts,
              rounds);
  std::printf("  start + join  thread %7.1f us  process %7.1f us  (%.1fx)\n", start_us[0],
              start_us[1], start_us[1] / start_us[0]);
  std::printf("  round trip    thread %7.1f us  process %7.1f us  (%.1fx)\n", trip_us[0],
              trip_us[1], trip_us[1] / trip_us[0]);
}

// 4. A crash is contained: a child dies of a segfault, the parent reads how
// and carries on. (A thread that segfaulted would end the whole process.)
void contained_crash() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);  // no core file for a crash we meant
    std::raise(SIGSEGV);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::printf("a child crashed: it %s; the parent goes on\n", describe_wait_status(status).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 200'000'000;
  int parts = 2;
  CLI::App app{"One task on threads and on processes: what each shares, costs and risks."};
  app.add_option("--n", n, "terms of the sum")->check(spmd::flags::count(1, int64_t(1) << 40));
  app.add_option("--parts", parts, "threads, and processes, to run it on")
      ->check(spmd::flags::count(1, 64));
  CLI11_PARSE(app, argc, argv);
  try {
    // Unbuffered: a forked child must not inherit, and print again, unwritten output.
    std::setvbuf(stdout, nullptr, _IONBF, 0);
    time_the_task(n, parts);
    shared_counter(parts, /*increments=*/100'000);
    start_and_switch_cost(/*starts=*/200, /*rounds=*/5'000);
    contained_crash();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "00_threads_vs_processes: %s\n", e.what());
    return 1;
  }
  return 0;
}
