// A peer's tensor memory, mapped into this process: the half of zero-copy
// (zero_copy.h) that turns what a peer published about its buffer into an
// address here. A rank's large CPU tensors live in shareable blocks
// (tensor/cpu/allocator.h: a memory file each); the rank describes a buffer
// by its pid, the block's file descriptor and serial, and the buffer's
// offset and size in the block. A peer of the same user opens the block as
// /proc/<pid>/fd/<fd> and maps it MAP_SHARED: the same pages, so a copy from
// the mapping reads the owner's tensor with no kernel copy in between.
//
// Mappings are cached, one per (peer, fd), a bounded number (least recently
// used goes first), since a training step hands the same blocks to every
// collective (the allocator caches them). A descriptor number is reused once
// its block is freed, so a cached mapping is used only when its serial
// matches too, and one of the same (peer, fd) with another serial is dropped
// at once: that block is gone from the owner. The mappings a collective
// asked for since its begin_collective() are never evicted: it still reads
// or writes them; when it needs more than the limits allow, it exceeds them,
// and the next collective evicts down to them again. A mapping keeps its
// block's pages alive after the owner freed it, until it is dropped; a peer
// that dies leaves its mapped pages readable (no SIGBUS), so a copy in
// progress ends and the next barrier names the dead peer.
//
// Thread-safety: none; the thread running the group's collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace spmd::dist::shm {

// What a rank publishes about a buffer its peers read (or write), in the
// group segment. fd < 0: not in a shareable block.
struct BufferDescriptor {
  int32_t pid = 0;
  int32_t fd = -1;
  uint64_t serial = 0;
  uint64_t offset = 0;       // of the buffer in its block
  uint64_t block_bytes = 0;  // the whole block (what a peer maps)
  bool shareable() const { return fd >= 0; }
};

// This process's buffer [data, data + bytes): its descriptor when it lies in
// one shareable block, else a descriptor with fd = -1.
BufferDescriptor describe_buffer(const void* data, size_t bytes);

// Maps /proc/<pid>/fd/<fd>, which must be a file of `bytes` bytes, shared
// and read-write. Returns null and sets *why when it cannot (another user,
// another pid namespace, the file gone or of another size).
void* map_process_file(int pid, int fd, size_t bytes, std::string* why);

// The set-up check that a group's ranks can map each other's blocks (the
// same user, the same pid namespace, /proc readable): each rank makes a
// one-page memory file holding a random cookie and publishes its text; each
// peer maps it and reads the cookie back.
class MappingProbe {
 public:
  MappingProbe();  // none (text() empty) when the system refuses one
  ~MappingProbe();
  MappingProbe(const MappingProbe&) = delete;
  MappingProbe& operator=(const MappingProbe&) = delete;

  // "<pid> <fd> <cookie>"; empty when there is none.
  std::string text() const;
  // Whether this process maps the probe `text` describes and finds its
  // cookie there; else false, and why.
  static bool check(const std::string& text, std::string* why);

 private:
  int fd_ = -1;
  uint64_t cookie_ = 0;
};

class PeerMemory {
 public:
  // The cache's bounds: mappings, and the bytes they map.
  struct Limits {
    size_t max_mappings;
    size_t max_mapped_bytes;
  };

  explicit PeerMemory(Limits limits) : limits_(limits) {}
  ~PeerMemory();
  PeerMemory(const PeerMemory&) = delete;
  PeerMemory& operator=(const PeerMemory&) = delete;

  // A collective begins: the mappings address() hands out from now until the
  // next call stay mapped until then.
  void begin_collective() { ++collective_; }

  // The address here of the buffer `d` that rank `peer` published, its block
  // mapped now or earlier. REQUIRES: d.shareable(). Throws CommError naming
  // the peer when the block cannot be mapped.
  char* address(int peer, const BufferDescriptor& d);

  // The blocks mapped now.
  size_t mappings() const { return mappings_.size(); }

 private:
  struct Mapping {
    int peer;
    int32_t fd;
    uint64_t serial;
    char* base;
    size_t bytes;
    uint64_t last_used;
    uint64_t collective;  // the last that asked for it
  };
  void drop(size_t i);
  // Drops the least recently used mappings that no collective in progress
  // uses until `bytes` more fit the limits, or none is left to drop.
  void evict_for(size_t bytes);

  Limits limits_;
  std::vector<Mapping> mappings_;
  size_t mapped_bytes_ = 0;
  uint64_t uses_ = 0, collective_ = 0;
};

}  // namespace spmd::dist::shm
