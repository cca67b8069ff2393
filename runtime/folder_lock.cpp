// FolderLock: flock(2) on <folder>/.spmd-lock, and the holder's line in it.
#include "runtime/folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>

#include "runtime/error.h"

namespace spmd {

namespace {

std::string read_all(int fd) {
  std::string text;
  char buf[512];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0 && text.size() < 4096;)
    text.append(buf, size_t(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

// "pid 4242 on host node3 since 2026-12-03 10:41:07 UTC: spmd-train --config ..."
std::string holder_line() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char when[64];
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string command((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char& c : command) c = c == '\0' ? ' ' : c;
  while (!command.empty() && command.back() == ' ') command.pop_back();
  return str_cat("pid ", ::getpid(), " on host ", host, " since ", when, ": ", command);
}

}  // namespace

FolderLock::FolderLock(const std::filesystem::path& folder, const std::string& key) {
  const std::filesystem::path file = folder / kFileName;
  fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  SPMD_CHECK(fd_ >= 0, key, " = \"", folder.string(), "\": cannot open its lock file ",
             file.string(), " (", std::strerror(errno), ")");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = read_all(fd_);
    ::close(fd_);
    fd_ = -1;
    SPMD_CHECK(err == EWOULDBLOCK, key, " = \"", folder.string(), "\": cannot lock ", file.string(),
               " (", std::strerror(err), ")");
    SPMD_THROW(InvalidArgument, key, " = \"", folder.string(), "\" is in use by another job (",
               holder.empty() ? "its holder has not written its name yet" : holder,
               "): two jobs writing one folder would mix their files; give this run another "
               "folder, or end that job");
  }
  previous_ = read_all(fd_);
  const std::string mine = holder_line() + "\n";
  if (::ftruncate(fd_, 0) == 0 &&
      ::pwrite(fd_, mine.data(), mine.size(), 0) == ssize_t(mine.size()))
    ::fsync(fd_);
}

FolderLock::FolderLock(FolderLock&& other) noexcept
    : fd_(other.fd_), previous_(std::move(other.previous_)) {
  other.fd_ = -1;
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor drops the flock
}

}  // namespace spmd
