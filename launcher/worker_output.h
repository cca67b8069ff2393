// What happens to a worker's stdout and stderr. Each stream arrives through a
// pipe in chunks; WorkerOutput cuts it into lines and sends each line where
// the flags say:
//
//   console   "[rank3]: <line>" on the launcher's own stdout or stderr, unless
//             the stream is redirected or the local rank is filtered out
//   log file  "<line>" in <log dir>/<run id>/attempt_<n>/rank_<R>/stdout.log
//             (or stderr.log) when the stream is tee'd or redirected
//   tail      the last lines of both streams, kept for the failure report
//
// A line is written with one write(), so lines of different workers never
// mix within a line. A line longer than 64 KiB reaches the log file whole
// (written in 64 KiB pieces as it arrives) and the console in prefixed
// pieces. Console lines go through ConsoleWriter, which never blocks.
#pragma once

#include <deque>
#include <string>
#include <vector>

namespace spmd::launcher {

struct OutputRoute {
  bool console = true;    // print prefixed on the launcher's matching stream
  std::string file_path;  // also write here (empty: no file)
};

class WorkerOutput {
 public:
  // stdout_route and stderr_route say where each stream goes; the log files
  // are created (with their folders) now. Throws Error when one cannot be.
  WorkerOutput(int rank, OutputRoute stdout_route, OutputRoute stderr_route, size_t tail_lines);
  ~WorkerOutput();
  WorkerOutput(const WorkerOutput&) = delete;
  WorkerOutput& operator=(const WorkerOutput&) = delete;

  // Bytes read from the worker's stdout (stream 1) or stderr (stream 2).
  void feed(int stream, const char* data, size_t n);
  // The stream ended: a last line without a newline is emitted as one.
  void finish(int stream);

  // The last lines of output (both streams, in arrival order), oldest first.
  std::vector<std::string> tail() const { return {tail_.begin(), tail_.end()}; }
  std::string file_path(int stream) const { return streams_[stream - 1].route.file_path; }

 private:
  struct Stream {
    OutputRoute route;
    int file_fd = -1;
    std::string partial;    // bytes after the last newline
    bool mid_line = false;  // the head of a long line went out without its newline
  };
  void emit(int stream, const std::string& piece, bool line_ends);

  int rank_;
  Stream streams_[2];
  size_t tail_lines_;
  std::deque<std::string> tail_;
};

}  // namespace spmd::launcher
