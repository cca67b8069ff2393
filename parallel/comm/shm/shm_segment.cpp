// Creating, opening and mapping shared-memory segments (see the header).
#include "parallel/comm/shm/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "runtime/error.h"

namespace spmd::dist::shm {
namespace {

[[noreturn]] void fail_sys(const char* call, const std::string& name, const std::string& who,
                           int err) {
  SPMD_THROW(CommError, "shared memory with ", who, ": ", call, "(", name,
             ") failed: ", std::strerror(err),
             " (is /dev/shm mounted and large enough? SPMD_TRANSPORT=tcp avoids shared memory)");
}

// Maps fd and closes it (the mapping keeps the memory).
void* map_and_close(int fd, size_t bytes, const std::string& name, const std::string& who) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) fail_sys("mmap", name, who, err);
  return p;
}

}  // namespace

SharedSegment create_segment(size_t bytes, const std::string& tag, const std::string& who) {
  static std::atomic<uint64_t> counter{0};
  SharedSegment s;
  s.name = str_cat("/spmd-", ::getpid(), "-", tag, "-", counter.fetch_add(1));
  s.bytes = bytes;
  const int fd = ::shm_open(s.name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) fail_sys("shm_open", s.name, who, errno);
  // Every page is reserved now: on a full tmpfs, touching an unreserved page
  // of a mapping would kill the process with SIGBUS later.
  if (const int err = ::posix_fallocate(fd, 0, off_t(bytes)); err != 0) {
    ::close(fd);
    ::shm_unlink(s.name.c_str());
    fail_sys("posix_fallocate", s.name, who, err);
  }
  try {
    s.base = map_and_close(fd, bytes, s.name, who);
  } catch (...) {
    ::shm_unlink(s.name.c_str());
    throw;
  }
  return s;
}

void* open_segment(const std::string& name, size_t bytes, bool unlink, const std::string& who) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) fail_sys("shm_open", name, who, errno);
  if (unlink) ::shm_unlink(name.c_str());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || size_t(st.st_size) != bytes) {
    ::close(fd);
    SPMD_THROW(CommError, "shared memory with ", who, ": segment ", name, " has ", st.st_size,
               " bytes, expected ", bytes);
  }
  return map_and_close(fd, bytes, name, who);
}

void unmap_segment(const SharedSegment& s) {
  if (s.base) ::munmap(s.base, s.bytes);
}

}  // namespace spmd::dist::shm
