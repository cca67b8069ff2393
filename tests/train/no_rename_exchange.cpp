// no_rename_exchange PROGRAM ARGS...: runs PROGRAM (and everything it starts)
// as on a filesystem that cannot exchange two names: the kernel answers
// renameat2(..., RENAME_EXCHANGE) with EINVAL, as vfat or an older NFS do,
// through a seccomp filter that every child inherits. A checkpoint saved
// over an older one of the same step then takes save_sharded's fallback of
// two renames, which test_train_faults.sh cuts between.
//
// Exits 77 (ctest's skip) when the filter cannot be installed, or when an
// exchange still succeeds under it (another architecture's numbers).
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

bool install_filter() {
  // seccomp_data: nr, arch, instruction_pointer, args[6] (64 bits each; the
  // flags, args[4], fit in the low word, first on a little-endian machine).
  const uint32_t flags_low = offsetof(struct seccomp_data, args) + 4 * sizeof(uint64_t);
  sock_filter program[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),  // another architecture: untouched
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_renameat2, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, flags_low),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, RENAME_EXCHANGE, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EINVAL & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog fprog{static_cast<unsigned short>(sizeof program / sizeof program[0]), program};
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) == 0;
}

// Whether an exchange of two real files now fails with EINVAL.
bool exchange_refused() {
  char dir[] = "/tmp/no_rename_exchange_XXXXXX";
  if (::mkdtemp(dir) == nullptr) return false;
  const std::string a = std::string(dir) + "/a", b = std::string(dir) + "/b";
  std::fclose(std::fopen(a.c_str(), "w"));
  std::fclose(std::fopen(b.c_str(), "w"));
  const int rc = ::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE);
  const int err = errno;
  ::unlink(a.c_str());
  ::unlink(b.c_str());
  ::rmdir(dir);
  return rc != 0 && err == EINVAL;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: no_rename_exchange PROGRAM ARGS...\n");
    return 2;
  }
  if (!install_filter()) {
    std::fprintf(stderr, "no_rename_exchange: cannot install the seccomp filter: %s\n",
                 std::strerror(errno));
    return 77;
  }
  if (!exchange_refused()) {
    std::fprintf(stderr, "no_rename_exchange: an exchange still succeeds under the filter\n");
    return 77;
  }
  ::execvp(argv[1], argv + 1);
  std::fprintf(stderr, "no_rename_exchange: cannot run %s: %s\n", argv[1], std::strerror(errno));
  return 127;
}
