// The console thread: take the oldest line of either stream, write it with
// blocking writes, repeat. Only this thread ever waits on the console.
#include "launcher/console_writer.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

#include "runtime/error.h"

namespace spmd::launcher {

void write_fully(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t k = ::write(fd, s.data() + done, s.size() - done);
    if (k > 0) {
      done += static_cast<size_t>(k);
    } else if (k < 0 && errno != EINTR) {
      return;
    }
  }
}

namespace {

std::string dropped_note(uint64_t n) {
  return str_cat("[spmdrun]: ", n, " line", n == 1 ? "" : "s",
                 " of worker output dropped here: the console did not read them in time"
                 " (--log-dir keeps every line)\n");
}

}  // namespace

ConsoleWriter& ConsoleWriter::instance() {
  static ConsoleWriter* writer = new ConsoleWriter();  // never destroyed, see the header
  return *writer;
}

ConsoleWriter::ConsoleWriter() {
  thread_ = std::thread([this] { run(); });
  thread_.detach();
}

void ConsoleWriter::write(int fd, std::string text, bool droppable) {
  std::lock_guard<std::mutex> lock(mu_);
  Queue& q = queues_[fd == 2 ? 1 : 0];
  if (droppable && q.bytes + text.size() > kMaxQueuedBytes) {
    ++q.dropped;
    ++q.dropped_total;
    return;
  }
  if (q.dropped > 0) {  // room again: say what was lost, where it was lost
    std::string note = dropped_note(q.dropped);
    q.bytes += note.size();
    q.lines.push_back(std::move(note));
    q.dropped = 0;
  }
  q.bytes += text.size();
  q.lines.push_back(std::move(text));
  cv_.notify_one();
}

void ConsoleWriter::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return !queues_[0].lines.empty() || !queues_[1].lines.empty(); });
    for (int i = 0; i < 2; ++i) {
      Queue& q = queues_[i];
      if (q.lines.empty()) continue;
      std::string line = std::move(q.lines.front());
      q.lines.pop_front();
      writing_ = true;
      lock.unlock();
      write_fully(i + 1, line);  // may block: only this thread waits
      lock.lock();
      writing_ = false;
      q.bytes -= line.size();
    }
    if (queues_[0].lines.empty() && queues_[1].lines.empty()) idle_.notify_all();
  }
}

bool ConsoleWriter::flush(std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_.wait_for(lock, limit, [&] {
    return queues_[0].lines.empty() && queues_[1].lines.empty() && !writing_;
  });
}

void ConsoleWriter::drain(std::chrono::milliseconds limit) {
  flush(limit);
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t dropped = 0;
  for (const Queue& q : queues_) dropped += q.dropped_total + q.lines.size();
  lock.unlock();
  if (dropped == 0) return;
  const std::string note = dropped_note(dropped);
  pollfd p{2, POLLOUT, 0};  // best effort: stderr may be the console that is stuck
  if (::poll(&p, 1, 0) == 1 && (p.revents & POLLOUT)) (void)!::write(2, note.data(), note.size());
}

}  // namespace spmd::launcher
