// cgroup_memory_limit() (runtime/cgroup_memory.h) on fake cgroup trees whose
// numbers are worked out by hand: v2 and v1, the tightest ancestor, the page
// cache left out of the usage, a container whose cgroup is the mount's root;
// and, as root with a writable memory hierarchy, on a real child cgroup that
// a forked process joins ([real], hidden from the plain run: its own ctest
// entry, skipped otherwise).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "runtime/cgroup_memory.h"
#include "tests/skip.h"

using namespace spmd;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;

// A fake /proc/self/cgroup and mount root under a fresh folder.
struct FakeTree {
  fs::path dir = fs::temp_directory_path() / ("spmd_cgroup_" + std::to_string(::getpid()));
  FakeTree(const std::string& proc_self_cgroup) {
    fs::remove_all(dir);
    fs::create_directories(dir / "mnt");
    write("proc_self_cgroup", proc_self_cgroup);
  }
  ~FakeTree() { fs::remove_all(dir); }
  void write(const std::string& path, const std::string& text) const {
    fs::create_directories((dir / path).parent_path());
    std::ofstream(dir / path) << text;
  }
  CgroupFiles files() const {
    return {(dir / "proc_self_cgroup").string(), (dir / "mnt").string()};
  }
};

}  // namespace

TEST_CASE("cgroup v2: the tightest level up the tree, less reclaimable cache", "[cgroup]") {
  FakeTree t("0::/job/step\n");
  t.write("mnt/job/step/memory.max", "max\n");
  t.write("mnt/job/step/memory.current", "104857600\n");
  t.write("mnt/job/memory.max", std::to_string(4096 * kMiB) + "\n");
  t.write("mnt/job/memory.current", std::to_string(1024 * kMiB) + "\n");
  t.write("mnt/job/memory.stat", "anon 1\ninactive_file " + std::to_string(256 * kMiB) + "\n");
  auto limit = cgroup_memory_limit(t.files());
  REQUIRE(limit.has_value());
  CHECK(limit->limit == 4096 * kMiB);
  CHECK(limit->usage == 768 * kMiB);  // 1024 in use, 256 of it inactive page cache
  CHECK(limit->left() == 3328 * kMiB);
  CHECK(limit->file == (t.dir / "mnt/job/memory.max").string());

  // A looser limit that leaves less (an ancestor nearly full) wins.
  t.write("mnt/memory.max", std::to_string(8192 * kMiB));
  t.write("mnt/memory.current", std::to_string(7680 * kMiB));
  limit = cgroup_memory_limit(t.files());
  REQUIRE(limit.has_value());
  CHECK(limit->left() == 512 * kMiB);
  CHECK(limit->file == (t.dir / "mnt/memory.max").string());
}

TEST_CASE("cgroup v1: the memory controller's hierarchy, its huge 'no limit'", "[cgroup]") {
  FakeTree t("5:cpu,cpuacct:/\n4:memory:/process_api/abc\n0::/\n");
  t.write("mnt/memory/process_api/abc/memory.limit_in_bytes", "9223372036854771712\n");
  t.write("mnt/memory/process_api/abc/memory.usage_in_bytes", "20652032\n");
  t.write("mnt/memory/process_api/memory.limit_in_bytes", std::to_string(2048 * kMiB));
  t.write("mnt/memory/process_api/memory.usage_in_bytes", std::to_string(1024 * kMiB));
  t.write("mnt/memory/process_api/memory.stat", "cache 5\ntotal_inactive_file 0\n");
  const auto limit = cgroup_memory_limit(t.files());
  REQUIRE(limit.has_value());
  CHECK(limit->limit == 2048 * kMiB);
  CHECK(limit->left() == 1024 * kMiB);
  CHECK(limit->file == (t.dir / "mnt/memory/process_api/memory.limit_in_bytes").string());
}

TEST_CASE("cgroup: a container's own cgroup is the mount's root; no limit is nullopt", "[cgroup]") {
  FakeTree t("0::/docker/0123abcd\n");  // a path the container's mount does not show
  t.write("mnt/memory.max", std::to_string(3072 * kMiB));
  t.write("mnt/memory.current", std::to_string(1024 * kMiB));
  const auto limit = cgroup_memory_limit(t.files());
  REQUIRE(limit.has_value());
  CHECK(limit->left() == 2048 * kMiB);

  t.write("mnt/memory.max", "max\n");
  CHECK_FALSE(cgroup_memory_limit(t.files()).has_value());
  FakeTree none("garbage line\n");
  CHECK_FALSE(cgroup_memory_limit(none.files()).has_value());
}

namespace {

// This process's folder in the hierarchy of `controller` ("" for v2) under
// `mount`, or "".
fs::path own_folder(const std::string& mount, const std::string& controller) {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (b != std::string::npos && line.substr(a + 1, b - a - 1) == controller)
      return fs::path(mount) / fs::path(line.substr(b + 1)).relative_path();
  }
  return {};
}

// Makes a child cgroup of 256 MiB, moves a forked process into it, and
// returns what cgroup_memory_limit() found there ("" and `why` when the
// machine does not allow it).
std::string limit_seen_in_child(const fs::path& parent, const char* limit_file, std::string& why) {
  const fs::path child = parent / ("spmd_test_" + std::to_string(::getpid()));
  std::error_code ec;
  if (parent.empty() || !fs::create_directory(child, ec)) {
    why = "cannot make a cgroup under " + parent.string() + ": " + ec.message();
    return "";
  }
  std::ofstream(child / limit_file) << 256 * kMiB;
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::ofstream(child / "cgroup.procs") << ::getpid() << std::flush;
    const auto limit = cgroup_memory_limit();
    const std::string seen = limit ? std::to_string(limit->limit) + " " + limit->file : "none";
    (void)!::write(fds[1], seen.data(), seen.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  char buf[512];
  const ssize_t n = ::read(fds[0], buf, sizeof buf);
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  fs::remove(child, ec);
  if (n <= 0) why = "the child said nothing";
  return n > 0 ? std::string(buf, size_t(n)) : "";
}

}  // namespace

TEST_CASE("cgroup: a real child cgroup's limit, as the process inside it finds it",
          "[.][cgroup][real]") {
  if (::geteuid() != 0) SPMD_SKIP("not root: no child cgroup can be made here");
  std::string why_v2, why_v1;
  const fs::path v2 = own_folder("/sys/fs/cgroup", "");
  if (!v2.empty() && fs::exists(v2 / "memory.max")) {
    const std::string seen = limit_seen_in_child(v2, "memory.max", why_v2);
    if (!seen.empty()) {
      CHECK_THAT(seen, Catch::StartsWith(std::to_string(256 * kMiB) + " ") &&
                           Catch::EndsWith("/memory.max"));
      return;
    }
  } else {
    why_v2 = "no v2 memory controller in this process's cgroup";
  }
  const fs::path v1 = own_folder("/sys/fs/cgroup/memory", "memory");
  const std::string seen = limit_seen_in_child(v1, "memory.limit_in_bytes", why_v1);
  if (seen.empty()) SPMD_SKIP("no writable memory cgroup: v2: " + why_v2 + "; v1: " + why_v1);
  CHECK_THAT(seen, Catch::StartsWith(std::to_string(256 * kMiB) + " ") &&
                       Catch::EndsWith("/memory.limit_in_bytes"));
}
