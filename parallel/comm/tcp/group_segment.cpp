// Setting up a group's shared segment (see the header).
#include "parallel/comm/tcp/group_segment.h"

#include <sys/mman.h>

#include <cstdint>

#include "parallel/comm/tcp/shm_ring.h"
#include "runtime/error.h"

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
  const std::string name_key = group + "/shm_segment", all_key = group + "/shm_segment_all";
  const std::string who = "group " + group;
  const size_t bytes = total_bytes(size, slot_bytes);
  if (rank == 0) {
    SharedSegment s = create_segment(bytes, "group", who);
    new (s.base) GroupHeader{kGroupMagic, uint64_t(size), slot_bytes};
    store.set(name_key, s.name);
    try {
      store.wait({all_key}, timeout);
    } catch (...) {
      ::shm_unlink(s.name.c_str());
      unmap_segment(s);
      throw;
    }
    ::shm_unlink(s.name.c_str());  // every rank has it mapped
    return std::unique_ptr<GroupSegment>(new GroupSegment(std::move(s), size, slot_bytes));
  }
  SharedSegment s;
  const Bytes value = store.get(name_key, timeout);
  s.name.assign(value.begin(), value.end());
  s.bytes = bytes;
  s.base = open_segment(s.name, bytes, /*unlink=*/false, who);
  const auto* h = static_cast<const GroupHeader*>(s.base);
  if (h->magic != kGroupMagic || h->ranks != uint64_t(size) || h->slot_bytes != slot_bytes) {
    unmap_segment(s);
    SPMD_THROW(CommError, "group ", group, ": the shared segment ", s.name,
               " does not match this rank's settings (SPMD_SHM_SLOT_BYTES must be alike on "
               "every rank)");
  }
  if (store.add(group + "/shm_segment_mapped", 1) == size - 1) store.set(all_key, "1");
  return std::unique_ptr<GroupSegment>(new GroupSegment(std::move(s), size, slot_bytes));
}

GroupSegment::~GroupSegment() { unmap_segment(segment_); }

char* GroupSegment::slot(int set, int rank) const {
  return static_cast<char*>(segment_.base) + kCacheLine +
         (size_t(set) * size_t(size_) + size_t(rank)) * slot_bytes_;
}

}  // namespace spmd::dist::tcp
