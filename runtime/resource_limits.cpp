// Memory, descriptor and process limits, read from /proc, getrlimit and the
// cgroup file system.
#include "runtime/resource_limits.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "runtime/error.h"

namespace spmd {
namespace {

constexpr uint64_t kUnlimited = kNoMemoryLimit;

// A "Key:   123 kB" line of a /proc status file, in bytes (kUnlimited when absent).
uint64_t proc_kb_field(const char* file, const std::string& key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stoull(line.substr(key.size() + 1)) * 1024;
  return kUnlimited;
}

// The tasks (threads) that `uid` runs now, from /proc/<pid>/status.
int64_t tasks_of_user(uid_t uid) {
  int64_t tasks = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::ifstream in(entry.path() / "status");
    bool mine = false;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("Uid:", 0) == 0) mine = std::stoul(line.substr(4)) == uid;
      if (mine && line.rfind("Threads:", 0) == 0) tasks += std::stoll(line.substr(8));
    }
  }
  return tasks;
}

uint64_t saturating_product(uint64_t a, uint64_t b) {
  return b != 0 && a > kUnlimited / b ? kUnlimited : a * b;
}

void take_smaller(MemoryBudget& b, uint64_t bytes, const std::string& source) {
  if (bytes < b.bytes) b = {bytes, source};
}

}  // namespace

MemoryLimits memory_limits(const CgroupFiles& files) {
  MemoryLimits m;
  m.mem_available = proc_kb_field("/proc/meminfo", "MemAvailable");
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const uint64_t used = proc_kb_field("/proc/self/status", "VmSize");
    m.address_space_cap = uint64_t(as.rlim_cur);
    m.address_space_left = used < m.address_space_cap ? m.address_space_cap - used : 0;
  }
  m.cgroup = cgroup_memory_limit(files);
  return m;
}

MemoryBudget available_memory() {
  const MemoryLimits m = memory_limits();
  MemoryBudget b{kUnlimited, "no limit found"};
  take_smaller(b, m.mem_available, "MemAvailable in /proc/meminfo");
  take_smaller(b, m.address_space_left,
               "RLIMIT_AS (ulimit -v) of " + format_bytes(m.address_space_cap) +
                   ", less the address space in use");
  if (m.cgroup)
    take_smaller(b, m.cgroup->left(),
                 "the cgroup limit of " + format_bytes(m.cgroup->limit) + " in " + m.cgroup->file +
                     ", less its usage");
  return b;
}

uint64_t peak_resident_bytes() {
  const uint64_t hwm = proc_kb_field("/proc/self/status", "VmHWM");
  return hwm == kUnlimited ? 0 : hwm;
}

void check_memory_fits(const std::string& what, uint64_t bytes) {
  const MemoryBudget b = available_memory();
  if (bytes <= b.bytes) return;
  SPMD_THROW(OutOfMemoryError, what, " needs about ", format_bytes(bytes), ", but only ",
             format_bytes(b.bytes), " can be allocated (", b.source, ")");
}

std::string read_file_bounded(const std::string& path, const std::string& what,
                              uint64_t bytes_per_byte, uint64_t max_stream_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    SPMD_THROW(InvalidArgument, what, " ", path, ": ", std::strerror(errno));
  SPMD_CHECK(!S_ISDIR(st.st_mode), what, " ", path, " is a directory; give a file");
  const bool regular = S_ISREG(st.st_mode);
  if (regular)
    check_memory_fits(
        str_cat(
            "reading ", what, " ", path, " (", format_bytes(uint64_t(st.st_size)),
            bytes_per_byte > 1 ? str_cat(", ", bytes_per_byte, " bytes of memory per byte") : "",
            ")"),
        saturating_product(uint64_t(st.st_size), bytes_per_byte));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) SPMD_THROW(InvalidArgument, what, " ", path, ": cannot open: ", std::strerror(errno));
  // A stream's size is known only at its end: bound it by the stated limit
  // and by what memory allows for what the caller builds from it.
  const uint64_t memory_bound = available_memory().bytes / std::max<uint64_t>(bytes_per_byte, 1);
  const uint64_t limit = regular ? uint64_t(st.st_size) : std::min(max_stream_bytes, memory_bound);
  std::string out;
  out.reserve(regular ? size_t(limit) : 0);
  char buf[64 * 1024];
  for (;;) {
    ssize_t k = ::read(fd, buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      const int err = errno;
      ::close(fd);
      SPMD_THROW(InvalidArgument, what, " ", path, ": read failed: ", std::strerror(err));
    }
    if (k == 0) break;
    if (!regular && out.size() + size_t(k) > limit) {
      ::close(fd);
      SPMD_THROW(InvalidArgument, what, " ", path, " is not a regular file and gave more than ",
                 format_bytes(limit), " (the most spmd reads from a pipe or device",
                 limit < max_stream_bytes ? ", as memory allows" : "", "); give a file");
    }
    out.append(buf, size_t(k));
  }
  ::close(fd);
  return out;
}

std::string format_bytes(uint64_t bytes) {
  if (bytes == kUnlimited) return "unlimited";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

void check_process_limits(const std::string& what, int64_t processes, int64_t fds_per_process) {
  rlimit nproc{}, nofile{};
  // The kernel counts every task (thread) of the real user against
  // RLIMIT_NPROC, and does not enforce it for root.
  if (::getuid() != 0 && ::getrlimit(RLIMIT_NPROC, &nproc) == 0 &&
      nproc.rlim_cur != RLIM_INFINITY) {
    const int64_t running = tasks_of_user(::getuid());
    SPMD_CHECK(uint64_t(running + processes) <= uint64_t(nproc.rlim_cur), what, " starts ",
               processes, " processes, but this user may run at most ", nproc.rlim_cur,
               " (ulimit -u) and runs ", running, " already: raise it or start fewer");
  }
  constexpr int64_t kSpareFds = 64;  // the launcher's own: store, logs, signalfd...
  const int64_t fds = processes * fds_per_process + kSpareFds;
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
    SPMD_CHECK(uint64_t(fds) <= uint64_t(nofile.rlim_cur), what, " needs about ", fds,
               " open files here (", fds_per_process, " per process), but the limit is ",
               nofile.rlim_cur, " (ulimit -n): raise it (ulimit -n ", fds,
               ") or start fewer processes");
}

}  // namespace spmd
