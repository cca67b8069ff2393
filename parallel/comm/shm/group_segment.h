// GroupSegment: one shared-memory segment mapped by every rank of a group
// whose ranks all share a host: a slot per rank, in two sets used in turn,
// where the shared-segment collectives (segment_all_reduce.h,
// segment_collectives.h) work in place; and a post per rank, in two sets,
// where a small all_reduce is exchanged without a message
// (segment_small_all_reduce.h).
//
//   offset 0                   header line: magic, ranks, slot bytes, post bytes
//   kCacheLine                 one line per rank: its `asleep` flag
//   then                       posts, set 0: rank 0's, rank 1's, ... (post_stride each)
//   then                       posts, set 1: the same
//   then                       slots, set 0: rank 0's slot, rank 1's, ... (slot_bytes each)
//   + ranks * slot_bytes       slots, set 1: the same
//
// A post is a Post (its stamp and the collective's header, 40 bytes) and
// post_bytes of data behind it, in whole cache lines: up to 24 bytes of data
// share the stamp's line, so an 8-byte all_reduce moves one line per rank.
//
// Set-up, through the store: rank 0 creates it (shm_segment.h) and publishes
// its name under <group>/shm_segment (empty when it could not); every other
// rank maps it; every rank then says under <group>/shm_segment_ok/<rank>
// whether it has it, and reads what the others said; rank 0 unlinks the
// name. The group uses the segment only if every rank has it (else it warns
// and all_reduce stays on the ring), so the ranks agree. Likewise the posts:
// only if every rank's links to its peers are all shared memory (a post's
// reader may sleep, and its writer wakes it with a doorbell on their link,
// which a pair that fell back to TCP does not have). A group's ranks
// never write a slot while another reads it: the algorithm's barriers (over
// the links) order every access.
//
// Zero copy (zero_copy.h): when asked (zero_copy_bytes > 0), the ranks
// also check, through the store, that each can map the others' memory
// (MappingProbe, peer_memory.h); if all can, the group copies large
// collectives straight between the ranks' tensors, and this process's large
// CPU blocks become shareable from then on (cpu::share_host_blocks_from).
//
// Thread-safety: none; the thread running the group's collective.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "parallel/comm/shm/peer_memory.h"
#include "parallel/comm/shm/shm_ring.h"
#include "parallel/comm/shm/shm_segment.h"
#include "parallel/comm/shm/tuning.h"
#include "parallel/comm/tcp/wire.h"
#include "runtime/store.h"

namespace spmd::dist::shm {

// The head of a post: `stamp` says which exchange the post holds (stored
// last, with release, by its owner only); the header is the collective's,
// for the readers to check; the data follows at once.
struct Post {
  std::atomic<uint64_t> stamp{0};
  tcp::Header header;
  char* data() { return reinterpret_cast<char*>(this) + sizeof(Post); }
};
static_assert(sizeof(Post) == 40, "a post's data starts 40 bytes into its line");

class GroupSegment {
 public:
  // Every rank of the group calls it. From `tuning`: slot_bytes (a
  // multiple of 64), post_bytes (the data a post holds; 0: no posts),
  // segment_min_bytes (the smallest collective run in the slots),
  // zero_copy_bytes (the smallest zero-copy collective; 0: none) and the
  // bounds on the peers' blocks mapped. links_shm: every link of this rank
  // to a peer is shared memory. Null when some rank could not make or map
  // the segment.
  static std::unique_ptr<GroupSegment> connect(Store& store, const std::string& group, int rank,
                                               int size, const ShmTuning& tuning, bool links_shm,
                                               std::chrono::milliseconds timeout);
  ~GroupSegment();
  GroupSegment(const GroupSegment&) = delete;
  GroupSegment& operator=(const GroupSegment&) = delete;

  size_t slot_bytes() const { return slot_bytes_; }
  // The smallest broadcast, all_gather or reduce_scatter that runs in the
  // slots (segment_collectives.h).
  size_t min_bytes() const { return min_bytes_; }
  char* slot(int set, int rank) const;
  // The set the next chunk uses: 0, 1, 0, ... Every rank asks in the same
  // order (the same collectives, the same chunks), so they agree.
  int next_set() { return int(turn_++ & 1); }

  // The data a post holds; 0 when the group has no posts (some rank's links
  // are not all shared memory, or SPMD_SHM_POST_BYTES=0).
  size_t post_bytes() const { return posts_ ? post_bytes_ : 0; }
  // Whether an all_reduce of `bytes` goes through the posts: the group has
  // them and they hold it (an empty one too).
  bool fits_post(size_t bytes) const { return posts_ && bytes <= post_bytes_; }
  Post& post(int set, int rank) const;
  // Raised by `rank` before it sleeps waiting for posts.
  std::atomic<uint64_t>& asleep(int rank) const;
  // The stamp of the next exchange through the posts: 1, 2, 3, ...; it uses
  // post set stamp & 1. Every rank asks in the same order, so they agree.
  uint64_t next_stamp() { return ++stamps_; }
  // The stamp of the last exchange this rank began (0: none yet).
  uint64_t last_stamp() const { return stamps_; }

  // The smallest collective that goes zero-copy; 0 when the group has no
  // zero copy (not asked, or some rank cannot map its peers' memory).
  size_t zero_copy_bytes() const { return zero_copy_bytes_; }
  // The peers' buffers mapped here, for zero copy.
  PeerMemory& peer_memory() { return peer_memory_; }

 private:
  GroupSegment(SharedSegment segment, int size, size_t slot_bytes, size_t post_bytes, bool posts,
               size_t min_bytes, size_t zero_copy_bytes, PeerMemory::Limits mapping_limits)
      : segment_(std::move(segment)),
        size_(size),
        slot_bytes_(slot_bytes),
        post_bytes_(post_bytes),
        posts_(posts),
        min_bytes_(min_bytes),
        zero_copy_bytes_(zero_copy_bytes),
        peer_memory_(mapping_limits) {}
  char* base() const { return static_cast<char*>(segment_.base); }

  SharedSegment segment_;
  int size_;
  size_t slot_bytes_, post_bytes_;
  bool posts_;
  size_t min_bytes_;
  size_t zero_copy_bytes_;
  PeerMemory peer_memory_;
  uint64_t turn_ = 0, stamps_ = 0;
};

}  // namespace spmd::dist::shm
