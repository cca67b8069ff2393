// The host allocator's environment (tensor/cpu/allocator.h): SPMD_HUGE_PAGES
// decides whether large blocks are advised to use transparent huge pages,
// and a value out of range, or one of SPMD_CPU_CACHE_MB, is refused at the
// first allocation with the key, the value and the limit. The allocator reads
// its environment once per process, so each case runs this binary again on
// the hidden case "[.alloc_child]", which allocates a 12 MiB tensor and
// prints whether the kernel holds its pages as advised: the "hg" flag of the
// mapping that holds it in /proc/self/smaps (set by madvise(MADV_HUGEPAGE),
// whether or not the system then grants huge pages).
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "child_run.h"
#include "reference.h"

using namespace spmd;
using namespace spmd::test;

namespace {

// This test binary, run again with `env` (a list of VAR=value) on the
// hidden case, the allocator's variables cleared first.
ChildRun run_child(const std::string& env) {
  return run_self("-u SPMD_HUGE_PAGES -u SPMD_CPU_CACHE_MB " + env, "[.alloc_child]");
}

// The VmFlags of the mapping in /proc/self/smaps that holds address p.
std::string vm_flags_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = a >= lo && a < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line.substr(8);
    }
  }
  return "";
}

bool has_flag(const std::string& flags, const std::string& flag) {
  std::istringstream in(flags);
  std::string f;
  while (in >> f)
    if (f == flag) return true;
  return false;
}

}  // namespace

TEST_CASE("alloc child: prints how a large block's pages are advised", "[.alloc_child]") {
  try {
    const Tensor t = ops::zeros({3 << 20});  // 12 MiB, the pages touched
    const std::string flags = vm_flags_of(t.raw_data());
    REQUIRE(!flags.empty());
    std::printf("HUGE %d\n", int(has_flag(flags, "hg")));
  } catch (const std::exception& e) {
    std::printf("ERROR %s\n", e.what());
    FAIL("the allocation threw");
  }
}

TEST_CASE("large blocks are not advised to use huge pages unless SPMD_HUGE_PAGES=1",
          "[allocator]") {
  const ChildRun plain = run_child("");
  INFO(plain.out);
  CHECK(plain.status == 0);
  CHECK(plain.out.find("HUGE 0") != std::string::npos);

  const ChildRun off = run_child("SPMD_HUGE_PAGES=0");
  INFO(off.out);
  CHECK(off.status == 0);
  CHECK(off.out.find("HUGE 0") != std::string::npos);

  // A kernel built without transparent huge pages refuses the advice
  // (EINVAL), which the allocator ignores; there the flag cannot be set.
  const bool thp = std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled");
  const ChildRun on = run_child("SPMD_HUGE_PAGES=1");
  INFO(on.out);
  CHECK(on.status == 0);
  CHECK(on.out.find(thp ? "HUGE 1" : "HUGE 0") != std::string::npos);
}

TEST_CASE("the allocator refuses an environment value out of range, naming it", "[allocator]") {
  for (const std::string v : {"yes", "2", "-1", "1x"}) {
    const ChildRun r = run_child("SPMD_HUGE_PAGES=" + v);
    INFO(r.out);
    CHECK(r.status != 0);
    CHECK(r.out.find("SPMD_HUGE_PAGES=" + v + ": expected a whole number from 0 to 1") !=
          std::string::npos);
  }
  const ChildRun cap = run_child("SPMD_CPU_CACHE_MB=lots");
  INFO(cap.out);
  CHECK(cap.status != 0);
  CHECK(cap.out.find("SPMD_CPU_CACHE_MB=lots: expected a whole number from 0 to 1073741824") !=
        std::string::npos);
  const ChildRun uncached = run_child("SPMD_CPU_CACHE_MB=0");  // 0 turns the cache off
  INFO(uncached.out);
  CHECK(uncached.status == 0);
}
