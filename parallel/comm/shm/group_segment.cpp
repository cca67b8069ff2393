// Setting up a group's shared segment (see the header).
#include "parallel/comm/shm/group_segment.h"

#include <sys/mman.h>

#include <cstdint>

#include "parallel/comm/shm/shm_ring.h"
#include "runtime/error.h"
#include "runtime/logging.h"
#include "tensor/cpu/allocator.h"

namespace spmd::dist::shm {
namespace {

constexpr uint64_t kGroupMagic = 0x73706d6467726f75ull;  // "spmdgrou"

struct alignas(kCacheLine) GroupHeader {
  uint64_t magic;
  uint64_t ranks;
  uint64_t slot_bytes;
  uint64_t post_bytes;
};

// A post and its data in whole cache lines.
size_t post_stride(size_t post_bytes) {
  return (sizeof(Post) + post_bytes + kCacheLine - 1) / kCacheLine * kCacheLine;
}
size_t posts_offset(int size) { return kCacheLine + size_t(size) * kCacheLine; }
size_t slots_offset(int size, size_t post_bytes) {
  return posts_offset(size) + 2 * size_t(size) * post_stride(post_bytes);
}
size_t total_bytes(int size, size_t slot_bytes, size_t post_bytes) {
  return slots_offset(size, post_bytes) + 2 * size_t(size) * slot_bytes;
}

}  // namespace

std::unique_ptr<GroupSegment> GroupSegment::connect(Store& store, const std::string& group,
                                                    int rank, int size, const ShmTuning& tuning,
                                                    bool links_shm,
                                                    std::chrono::milliseconds timeout) {
  const size_t slot_bytes = tuning.slot_bytes, post_bytes = tuning.post_bytes;
  const size_t zero_copy_bytes = tuning.zero_copy_bytes;
  SPMD_CHECK(slot_bytes > 0 && slot_bytes % kCacheLine == 0, "shared segment slot of ", slot_bytes,
             " bytes: must be a positive multiple of ", kCacheLine);
  const std::string who = "group " + group;
  const size_t bytes = total_bytes(size, slot_bytes, post_bytes);
  SharedSegment s;
  std::string why;  // why this rank has no segment
  if (rank == 0) {
    try {
      s = create_segment(bytes, "group", who);
      new (s.base) GroupHeader{kGroupMagic, uint64_t(size), slot_bytes, post_bytes};
      for (int set = 0; set < 2; ++set) {
        for (int r = 0; r < size; ++r) {
          new (static_cast<char*>(s.base) + posts_offset(size) +
               (size_t(set) * size_t(size) + size_t(r)) * post_stride(post_bytes)) Post();
        }
      }
      for (int r = 0; r < size; ++r) {
        new (static_cast<char*>(s.base) + kCacheLine * size_t(1 + r)) RingCounter();
      }
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
            h->magic == kGroupMagic && h->ranks == uint64_t(size) && h->slot_bytes == slot_bytes &&
                h->post_bytes == post_bytes,
            "group ", group, ": the shared segment ", s.name,
            " does not match this rank's settings (SPMD_SHM_SLOT_BYTES and SPMD_SHM_POST_BYTES "
            "must be alike on every rank)");
      } catch (const Error& e) {
        unmap_segment(s);
        s.base = nullptr;
        why = e.what();
      }
    }
  }
  // Every rank says whether it has the segment mapped ("1"), and whether its
  // links are all shared memory too ("2"); the segment is used only if all
  // have it, the posts only if all say "2". A second letter says whether the
  // rank mapped every peer's probe ("z"): zero copy only if all did.
  std::unique_ptr<MappingProbe> probe;
  bool zero_copy = zero_copy_bytes > 0 && why.empty();
  bool all = true, posts = post_bytes > 0;
  try {
    if (zero_copy_bytes > 0) {  // every rank asks alike (the settings agree: ../host/transport.h)
      probe = std::make_unique<MappingProbe>();
      store.set(str_cat(group, "/zero_copy_probe/", rank), probe->text());
      for (int r = 0; r < size; ++r) {
        if (r == rank) continue;
        const Bytes text = store.get(str_cat(group, "/zero_copy_probe/", r), timeout);
        std::string no;
        if (zero_copy && !MappingProbe::check(std::string(text.begin(), text.end()), &no)) {
          SPMD_LOG_WARN("group ", group, ": no zero copy with rank ", r, " (", no, ")");
          zero_copy = false;
        }
      }
    }
    const char mine = !why.empty() ? '0' : links_shm ? '2' : '1';
    store.set(str_cat(group, "/shm_segment_ok/", rank), std::string{mine, zero_copy ? 'z' : '-'});
    for (int r = 0; r < size && all; ++r) {
      const Bytes ok = store.get(str_cat(group, "/shm_segment_ok/", r), timeout);
      all = ok.size() == 2 && (ok[0] == '1' || ok[0] == '2');
      posts &= all && ok[0] == '2';
      zero_copy &= all && ok[1] == 'z';
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
  if (zero_copy) cpu::share_host_blocks_from(zero_copy_bytes);
  return std::unique_ptr<GroupSegment>(
      new GroupSegment(std::move(s), size, slot_bytes, post_bytes, posts, tuning.segment_min_bytes,
                       zero_copy ? zero_copy_bytes : 0,
                       PeerMemory::Limits{tuning.max_mappings, tuning.max_mapped_bytes}));
}

GroupSegment::~GroupSegment() { unmap_segment(segment_); }

char* GroupSegment::slot(int set, int rank) const {
  return base() + slots_offset(size_, post_bytes_) +
         (size_t(set) * size_t(size_) + size_t(rank)) * slot_bytes_;
}

Post& GroupSegment::post(int set, int rank) const {
  return *reinterpret_cast<Post*>(base() + posts_offset(size_) +
                                  (size_t(set) * size_t(size_) + size_t(rank)) *
                                      post_stride(post_bytes_));
}

std::atomic<uint64_t>& GroupSegment::asleep(int rank) const {
  return reinterpret_cast<RingCounter*>(base() + kCacheLine * size_t(1 + rank))->value;
}

}  // namespace spmd::dist::shm
