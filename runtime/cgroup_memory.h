// The memory limit a Linux control group (cgroup) puts on this process: the
// limit a container, a Slurm job or systemd-run sets, which the kernel
// enforces by killing the process (the OOM killer) with no message.
//
// The process's cgroup is named in /proc/self/cgroup, one line per hierarchy:
//
//   0::/user.slice/job.scope             cgroup v2: one hierarchy, at /sys/fs/cgroup
//   4:memory:/process_api/f2e90a...      cgroup v1: the memory controller's, at
//                                        /sys/fs/cgroup/memory
//
// A limit set on any ancestor applies too, so the walk goes from the
// process's folder up to the hierarchy's root, and at each level that sets a
// limit (v2 memory.max, v1 memory.limit_in_bytes) takes what is left there:
// the limit less the usage (memory.current, memory.usage_in_bytes), less the
// page cache the kernel would reclaim first (inactive_file of memory.stat,
// as the kubelet counts a container's working set). The tightest level wins.
// In a container whose cgroup is the mount's root (cgroup namespaces, or
// Docker on v1), the process's path is not found under the mount: the mount
// itself is then the process's folder.
//
// Not here: v1 hierarchies with memory.use_hierarchy = 0 (the parents'
// limits are then not enforced on the child, yet are read as if they were),
// memory.high (a throttle, not a kill), swap.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace spmd {

// Where the cgroup files are; a test points them at a fake tree.
struct CgroupFiles {
  std::string proc_self_cgroup = "/proc/self/cgroup";
  std::string mount_root = "/sys/fs/cgroup";  // v2 here (or in unified/), v1 in memory/
};

struct CgroupMemoryLimit {
  uint64_t limit = 0;  // bytes, of the level that leaves least
  uint64_t usage = 0;  // bytes in use there now, less the reclaimable page cache
  std::string file;    // the limit's file: ".../memory.max" or ".../memory.limit_in_bytes"
  uint64_t left() const { return usage < limit ? limit - usage : 0; }
};

// The tightest memory limit over this process's cgroup and its ancestors, v2
// first, then v1; nullopt when no level sets one (or no cgroup file system
// is mounted).
std::optional<CgroupMemoryLimit> cgroup_memory_limit(const CgroupFiles& files = {});

}  // namespace spmd
