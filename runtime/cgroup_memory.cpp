// cgroup_memory_limit(): the process's cgroup from /proc/self/cgroup, then the
// walk up its folders, v2's files first and v1's after.
#include "runtime/cgroup_memory.h"

#include <filesystem>
#include <fstream>
#include <vector>

namespace spmd {
namespace {

namespace fs = std::filesystem;

// A limit this large is no limit: v1 writes 2^63 rounded down to a page.
constexpr uint64_t kNoLimit = uint64_t(1) << 62;

// The names of one hierarchy's files.
struct Version {
  const char* controller;  // in /proc/self/cgroup: "" for v2's single hierarchy, "memory" for v1
  std::vector<const char*> mounts;  // below mount_root
  const char* limit;
  const char* usage;
  const char* inactive_file;  // the key in memory.stat
};

const Version kV2{"", {"", "unified"}, "memory.max", "memory.current", "inactive_file"};
const Version kV1{
    "memory", {"memory"}, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"};

// The cgroup path of the hierarchy whose controller list names `controller`
// ("" matches v2's "0::" line), or nullopt.
std::optional<std::string> cgroup_path(const std::string& proc_self_cgroup,
                                       const std::string& controller) {
  std::ifstream in(proc_self_cgroup);
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string list = line.substr(a + 1, b - a - 1);
    const bool match = controller.empty()
                           ? list.empty()
                           : ("," + list + ",").find("," + controller + ",") != std::string::npos;
    if (match) return line.substr(b + 1);
  }
  return std::nullopt;
}

// The first word of a file as a number; nullopt for "max", a missing file
// or anything else.
std::optional<uint64_t> read_number(const fs::path& file) {
  std::ifstream in(file);
  std::string word;
  if (!(in >> word) || word.empty() || word.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  try {
    return std::stoull(word);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// "key value" from memory.stat; 0 when absent.
uint64_t stat_field(const fs::path& file, const std::string& key) {
  std::ifstream in(file);
  std::string k;
  uint64_t v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return 0;
}

// The walk of one hierarchy, from the process's folder up to the mount.
std::optional<CgroupMemoryLimit> walk(const fs::path& mount, const std::string& path,
                                      const Version& v) {
  std::error_code ec;
  const fs::path below = fs::path(path).relative_path();
  fs::path dir = below.empty() ? mount : mount / below;
  if (!fs::is_directory(dir, ec)) dir = mount;  // the process's cgroup is the mount's root
  std::optional<CgroupMemoryLimit> best;
  for (;;) {
    const auto limit = read_number(dir / v.limit);
    const auto usage = read_number(dir / v.usage);
    if (limit && *limit < kNoLimit && usage) {
      const uint64_t cache = stat_field(dir / "memory.stat", v.inactive_file);
      CgroupMemoryLimit level{*limit, cache < *usage ? *usage - cache : 0,
                              (dir / v.limit).string()};
      if (!best || level.left() < best->left()) best = level;
    }
    if (dir.string().size() <= mount.string().size()) break;  // the mount: the hierarchy's root
    dir = dir.parent_path();
  }
  return best;
}

}  // namespace

std::optional<CgroupMemoryLimit> cgroup_memory_limit(const CgroupFiles& files) {
  for (const Version* v : {&kV2, &kV1}) {
    const auto path = cgroup_path(files.proc_self_cgroup, v->controller);
    if (!path) continue;
    for (const char* sub : v->mounts) {
      fs::path root = fs::path(files.mount_root).lexically_normal();
      if (root.has_parent_path() && root.filename().empty()) root = root.parent_path();  // "a/b/"
      const fs::path mount = *sub ? root / sub : root;
      std::error_code ec;
      if (!fs::is_directory(mount, ec)) continue;
      if (auto limit = walk(mount, *path, *v)) return limit;
    }
  }
  return std::nullopt;
}

}  // namespace spmd
