// A POSIX shared-memory segment: created (O_EXCL, mode 0600, zero-filled) and
// mapped by one process, opened and mapped by others, unlinked as soon as
// every process that needs it has it mapped, so that nothing is left in
// /dev/shm once the mappings go, however the processes end. Used by the
// pairwise channels (shm_channel.h) and by a group's shared segment
// (group_segment.h).
#pragma once

#include <cstddef>
#include <string>

namespace spmd::dist::shm {

struct SharedSegment {
  std::string name;  // "/spmd-<creator's pid>-<what>-<n>"
  void* base = nullptr;
  size_t bytes = 0;
};

// Creates and maps a segment of `bytes`, every page reserved (so a full
// /dev/shm fails here, not later). `tag` goes into the name; `who` into
// errors ("rank 3", "group world"). Throws CommError naming the call that
// failed.
SharedSegment create_segment(size_t bytes, const std::string& tag, const std::string& who);
// Opens and maps the segment `name`, which must have `bytes`; unlinks the
// name at once when `unlink`.
void* open_segment(const std::string& name, size_t bytes, bool unlink, const std::string& who);
// Unmaps (a no-op for an empty segment).
void unmap_segment(const SharedSegment& s);

}  // namespace spmd::dist::shm
