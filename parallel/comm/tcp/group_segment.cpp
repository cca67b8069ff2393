// Setting up a group's shared segment (see the header).
#include "parallel/comm/tcp/group_segment.h"

#include <sys/mman.h>

#include <cstdint>

#include "parallel/comm/tcp/shm_ring.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace spmd::dist::tcp {
namespace {

constexpr uint64_t kGroupMagic = 0x73706d6467726f75ull;  // "spmdgrou"

struct alignas(kCacheLine) GroupHeader {
  uint64_t magic;
  uint64_t ranks;
  uint64_t slot_bytes;
};

size_t total_bytes(int size, size_t slot_bytes) {
  return kCacheLine + 2 * size_t(size) * slot_bytes;
}

}  // namespace

std::unique_ptr<GroupSegment> GroupSegment::connect(Store& store, const std::string& group,
                                                    int rank, int size, size_t slot_bytes,
                                                    std::chrono::milliseconds timeout) {
  SPMD_CHECK(slot_bytes > 0 && slot_bytes % kCacheLine == 0, "shared segment slot of ", slot_bytes,
             " bytes: must be a positive multiple of ", kCacheLine);
  const std::string who = "group " + group;
  const size_t bytes = total_bytes(size, slot_bytes);
  SharedSegment s;
  std::string why;  // why this rank has no segment
  if (rank == 0) {
    try {
      s = create_segment(bytes, "group", who);
      new (s.base) GroupHeader{kGroupMagic, uint64_t(size), slot_bytes};
    } catch (const Error& e) {
      why = e.what();
    }
    store.set(group + "/shm_segment", s.name);  // empty: there is none
  } else {
    const Bytes value = store.get(group + "/shm_segment", timeout);
    s.name.assign(value.begin(), value.end());
    if (s.name.empty()) {
      why = "rank 0 could not make it";
    } else {
      try {
        s.base = open_segment(s.name, bytes, /*unlink=*/false, who);
        s.bytes = bytes;
        const auto* h = static_cast<const GroupHeader*>(s.base);
        SPMD_CHECK(
            h->magic == kGroupMagic && h->ranks == uint64_t(size) && h->slot_bytes == slot_bytes,
            "group ", group, ": the shared segment ", s.name,
            " does not match this rank's settings (SPMD_SHM_SLOT_BYTES must be alike on "
            "every rank)");
      } catch (const Error& e) {
        unmap_segment(s);
        s.base = nullptr;
        why = e.what();
      }
    }
  }
  // Every rank says whether it has the segment mapped; it is used only if all do.
  store.set(str_cat(group, "/shm_segment_ok/", rank), why.empty() ? "1" : "0");
  bool all = true;
  try {
    for (int r = 0; r < size && all; ++r) {
      const Bytes ok = store.get(str_cat(group, "/shm_segment_ok/", r), timeout);
      all = ok.size() == 1 && ok[0] == '1';
    }
  } catch (...) {
    if (rank == 0 && s.base) ::shm_unlink(s.name.c_str());
    unmap_segment(s);
    throw;
  }
  if (rank == 0 && s.base) ::shm_unlink(s.name.c_str());  // every rank has mapped it, or never will
  if (!all) {
    if (!why.empty()) {
      SPMD_LOG_WARN("group ", group, ": no shared segment for all_reduce (", why,
                    "); all_reduce stays on the ring");
    }
    unmap_segment(s);
    return nullptr;
  }
  return std::unique_ptr<GroupSegment>(new GroupSegment(std::move(s), size, slot_bytes));
}

GroupSegment::~GroupSegment() { unmap_segment(segment_); }

char* GroupSegment::slot(int set, int rank) const {
  return static_cast<char*>(segment_.base) + kCacheLine +
         (size_t(set) * size_t(size_) + size_t(rank)) * slot_bytes_;
}

}  // namespace spmd::dist::tcp
