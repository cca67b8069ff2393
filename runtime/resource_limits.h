// What the machine lets this process have, asked before a program commits to
// something that would not fit: memory (the least of the kernel's estimate,
// the address-space limit and the cgroup's, runtime/cgroup_memory.h), file
// descriptors and processes.
// A program that checks first ends with a message naming the numbers; one
// that does not is killed by the kernel's OOM killer without a word.
//
//   check_memory_fits("--batch 100000", bytes_needed);   // OutOfMemoryError
//   std::string text = read_file_bounded(path, "--data");  // never unbounded
//
// Not here: accounting of what is allocated later (the estimate is the
// caller's), GPU memory (see tensor/ for the CUDA allocator's figures).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/cgroup_memory.h"

namespace spmd {

// What reads as "no limit" in the fields below.
inline constexpr uint64_t kNoMemoryLimit = ~uint64_t(0);

// Each limit on this process's memory, apart, so that a caller can share
// some of them between processes (a node's memory between its ranks) and not
// others (the address space is each process's own).
struct MemoryLimits {
  uint64_t mem_available = kNoMemoryLimit;       // MemAvailable of /proc/meminfo: the machine's
  uint64_t address_space_cap = kNoMemoryLimit;   // RLIMIT_AS (ulimit -v)
  uint64_t address_space_left = kNoMemoryLimit;  // RLIMIT_AS less VmSize
  std::optional<CgroupMemoryLimit> cgroup;       // the tightest level, cgroup_memory_limit()
};
MemoryLimits memory_limits(const CgroupFiles& files = {});

struct MemoryBudget {
  uint64_t bytes = 0;  // the most this process can still allocate, about
  std::string source;  // which limit says so: "MemAvailable in /proc/meminfo", ...
};

// The least of memory_limits(): MemAvailable (/proc/meminfo), RLIMIT_AS less
// the address space in use (VmSize), and what the cgroup's limit leaves.
MemoryBudget available_memory();

// The most memory this process has held resident so far (VmHWM of
// /proc/self/status, its peak RSS), in bytes; 0 when unknown.
uint64_t peak_resident_bytes();

// Throws OutOfMemoryError "<what> needs about N GiB, but only M GiB are
// available (<source>)" when `bytes` exceed available_memory().
void check_memory_fits(const std::string& what, uint64_t bytes);

// What read_file_bounded reads at most from a file that is not a regular
// file (a pipe, a device such as /dev/zero), whose size is not known.
inline constexpr uint64_t kMaxStreamBytes = 1ull << 30;

// Reads a whole file with a bound: a regular file by its size (checked
// first, times `bytes_per_byte` of memory the caller will build from it,
// against available_memory()); anything else up to `max_stream_bytes`.
// Throws InvalidArgument for a missing file, a directory or a stream over the
// bound, and OutOfMemoryError for a file that cannot fit. `what` names the
// file in messages ("--data").
std::string read_file_bounded(const std::string& path, const std::string& what,
                              uint64_t bytes_per_byte = 1,
                              uint64_t max_stream_bytes = kMaxStreamBytes);

// Human sizes for messages: 512 B, 3.0 KiB, 1.5 GiB.
std::string format_bytes(uint64_t bytes);

// Throws InvalidArgument naming `what` when starting `processes` children
// that keep `fds_per_process` descriptors open here would pass RLIMIT_NPROC
// (`ulimit -u`, counting the tasks the user already runs; not enforced for
// root) or RLIMIT_NOFILE (`ulimit -n`).
void check_process_limits(const std::string& what, int64_t processes, int64_t fds_per_process);

}  // namespace spmd
