// GroupSegment: one shared-memory segment mapped by every rank of a group
// whose ranks all share a host: a slot per rank, in two sets used in turn,
// where the shared-segment all_reduce (segment_all_reduce.h) works in place.
//
//   offset 0                   header line: magic, ranks, slot bytes
//   kCacheLine                 set 0: rank 0's slot, rank 1's, ... (slot_bytes each)
//   + ranks * slot_bytes       set 1: the same
//
// Set-up, through the store: rank 0 creates it (shm_segment.h) and publishes
// its name under <group>/shm_segment; every other rank maps it and counts
// itself under <group>/shm_segment_mapped (the last to do so sets
// <group>/shm_segment_all); rank 0 then unlinks the name. A group's ranks
// never write a slot while another reads it: the algorithm's barriers (over
// the links) order every access.
//
// Thread-safety: none; the thread running the group's collective.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "parallel/comm/tcp/shm_segment.h"
#include "runtime/store.h"

namespace spmd::dist::tcp {

class GroupSegment {
 public:
  // Every rank of the group calls it. slot_bytes: a multiple of 64.
  static std::unique_ptr<GroupSegment> connect(Store& store, const std::string& group, int rank,
                                               int size, size_t slot_bytes,
                                               std::chrono::milliseconds timeout);
  ~GroupSegment();
  GroupSegment(const GroupSegment&) = delete;
  GroupSegment& operator=(const GroupSegment&) = delete;

  size_t slot_bytes() const { return slot_bytes_; }
  char* slot(int set, int rank) const;
  // The set the next chunk uses: 0, 1, 0, ... Every rank asks in the same
  // order (the same collectives, the same chunks), so they agree.
  int next_set() { return int(turn_++ & 1); }

 private:
  GroupSegment(SharedSegment segment, int size, size_t slot_bytes)
      : segment_(std::move(segment)), size_(size), slot_bytes_(slot_bytes) {}

  SharedSegment segment_;
  int size_;
  size_t slot_bytes_;
  uint64_t turn_ = 0;
};

}  // namespace spmd::dist::tcp
