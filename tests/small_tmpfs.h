// A full disk, for real: run a function in a child process that has its own
// mount namespace with a small tmpfs (of the caller's size) on a fresh folder, so
// that writing past it fails with ENOSPC as a full disk does. Root gets the
// namespace directly; another user through a user namespace (where the
// kernel allows them). Where neither works the caller skips.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

namespace spmd::testing {

// What became of run_on_small_tmpfs's child.
enum class TmpfsRun { kPassed, kFailed, kUnavailable };

namespace detail {
inline bool write_text(const char* path, const std::string& text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size());
  ::close(fd);
  return ok;
}
}  // namespace detail

// Runs body(mount) in a child on a tmpfs of `bytes` at `mount`; the child
// passes when body returns true, within 100 s. kUnavailable when no mount
// namespace or tmpfs could be had (the child exits 77 then).
inline TmpfsRun run_on_small_tmpfs(size_t bytes,
                                   const std::function<bool(const std::string&)>& body) {
  char name[] = "/tmp/spmd_test_tmpfs_XXXXXX";
  if (::mkdtemp(name) == nullptr) return TmpfsRun::kUnavailable;
  const std::string mount = name;
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return TmpfsRun::kUnavailable;
  if (pid == 0) {
    const uid_t uid = ::geteuid();
    const gid_t gid = ::getegid();
    bool ok = uid == 0 ? ::unshare(CLONE_NEWNS) == 0 : ::unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0;
    if (ok && uid != 0) {
      ok = detail::write_text("/proc/self/setgroups", "deny") &&
           detail::write_text("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") &&
           detail::write_text("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1");
    }
    ok = ok && ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
    const std::string options = "size=" + std::to_string(bytes);
    ok = ok && ::mount("tmpfs", mount.c_str(), "tmpfs", 0, options.c_str()) == 0;
    if (!ok) ::_exit(77);
    ::alarm(100);  // a body that hangs ends (SIGALRM) and fails, before ctest's 120 s
    bool passed = false;
    try {
      passed = body(mount);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "run_on_small_tmpfs: the body threw: %s\n", e.what());
    }
    std::fflush(nullptr);
    ::_exit(passed ? 0 : 1);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return TmpfsRun::kFailed;
  }
  ::rmdir(mount.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) return TmpfsRun::kUnavailable;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? TmpfsRun::kPassed : TmpfsRun::kFailed;
}

}  // namespace spmd::testing
