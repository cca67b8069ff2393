// Cutting worker output into lines and routing each line.
#include "launcher/worker_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "launcher/console_writer.h"
#include "runtime/error.h"

namespace spmd::launcher {
namespace {

constexpr size_t kMaxLine = 64 * 1024;

int open_log(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) SPMD_THROW(Error, "cannot create the log file ", path, ": ", std::strerror(errno));
  return fd;
}

}  // namespace

WorkerOutput::WorkerOutput(int rank, OutputRoute stdout_route, OutputRoute stderr_route,
                           size_t tail_lines)
    : rank_(rank), tail_lines_(tail_lines) {
  streams_[0].route = std::move(stdout_route);
  streams_[1].route = std::move(stderr_route);
  for (Stream& s : streams_)
    if (!s.route.file_path.empty()) s.file_fd = open_log(s.route.file_path);
}

WorkerOutput::~WorkerOutput() {
  for (Stream& s : streams_)
    if (s.file_fd >= 0) ::close(s.file_fd);
}

void WorkerOutput::feed(int stream, const char* data, size_t n) {
  Stream& s = streams_[stream - 1];
  s.partial.append(data, n);
  size_t start = 0;
  for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1)
    emit(stream, s.partial.substr(start, nl - start), /*line_ends=*/true);
  s.partial.erase(0, start);
  while (s.partial.size() >= kMaxLine) {  // a long line goes out in pieces as it comes
    emit(stream, s.partial.substr(0, kMaxLine), /*line_ends=*/false);
    s.partial.erase(0, kMaxLine);
  }
}

void WorkerOutput::finish(int stream) {
  Stream& s = streams_[stream - 1];
  if (!s.partial.empty() || s.mid_line) emit(stream, s.partial, /*line_ends=*/true);
  s.partial.clear();
}

void WorkerOutput::emit(int stream, const std::string& piece, bool line_ends) {
  Stream& s = streams_[stream - 1];
  // The console shows a long line cut into prefixed pieces; the log file
  // gets it whole, its pieces written one after the other.
  if (s.route.console && !(s.mid_line && piece.empty()))
    ConsoleWriter::instance().write(stream, str_cat("[rank", rank_, "]: ", piece, "\n"));
  if (s.file_fd >= 0) write_fully(s.file_fd, line_ends ? piece + "\n" : piece);
  if (!s.mid_line) {
    tail_.push_back(piece);
    if (tail_.size() > tail_lines_) tail_.pop_front();
  }
  s.mid_line = !line_ends;
}

}  // namespace spmd::launcher
