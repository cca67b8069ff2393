// The launcher's console: worker lines bound for its stdout and stderr go
// through a queue that a thread of their own writes out, so a console that
// does not read (a pipe to a paused `less`, a full terminal buffer) never
// stops the agent's loop from reacting to signals and worker failures.
//
// The queue is bounded (kMaxQueuedBytes per stream); a line that does not fit
// is dropped and counted, and the count is said on the stream, once the
// console reads again, and at exit. Log files (--log-dir) never pass through
// here: they are written directly and keep every line.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace spmd::launcher {

// Writes all of s to fd, retrying short writes and EINTR; gives up quietly
// on any other error (a closed console or a full disk must not stop the
// job). The console thread below and the log files both write with it.
void write_fully(int fd, const std::string& s);

class ConsoleWriter {
 public:
  static constexpr size_t kMaxQueuedBytes = 8u << 20;

  // The one writer of this process's fd 1 and 2 (made on first use, never
  // destroyed: its thread may be stuck in a write when main() returns).
  static ConsoleWriter& instance();

  // Queues `text` for fd 1 or 2; never blocks. A worker's line (droppable)
  // is dropped and counted when the stream already has kMaxQueuedBytes
  // waiting; the launcher's own messages, few and short, always queue.
  void write(int fd, std::string text, bool droppable = true);
  // The launcher's own message on stderr, queued behind the workers' lines.
  static void say(std::string text) { instance().write(2, std::move(text), false); }
  // Waits up to `limit` for both queues to empty (before the launcher writes
  // something that must follow the workers' lines). True when nothing is left.
  bool flush(std::chrono::milliseconds limit);
  // flush(limit), then says on stderr how many lines were dropped in all, if
  // any (those still queued count as dropped): the last call, at exit.
  void drain(std::chrono::milliseconds limit);

 private:
  struct Queue {
    std::deque<std::string> lines;
    size_t bytes = 0;
    uint64_t dropped = 0;        // since the last note
    uint64_t dropped_total = 0;  // since the start
  };
  ConsoleWriter();
  void run();

  std::mutex mu_;
  std::condition_variable cv_, idle_;
  Queue queues_[2];  // fd 1, fd 2
  bool writing_ = false;
  std::thread thread_;
};

}  // namespace spmd::launcher
