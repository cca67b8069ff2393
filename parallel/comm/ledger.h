// The fingerprint ledger: what each rank has issued to a group, kept cheaply
// enough to be always on, so that ranks which call different collectives can
// be told apart by name. Every collective a rank issues is folded, with its
// sequence number, op, dtype, shape, reduce op, root and the caller's
// call-site tag, into a rolling hash; the last few entries are kept whole.
// Two ranks whose hashes agree at a sequence number issued the same
// collectives up to it.
//
// This file is the data and the comparison (pure functions, tested without
// communication); desync_check.h publishes each rank's record to the store and
// compares them when a collective fails. Not here: point-to-point operations
// (their order is per pair, not per group).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "parallel/comm/types.h"
#include "tensor/shape.h"

namespace spmd::dist {

// One collective as the ledger sees it.
struct LedgerEntry {
  static constexpr size_t kTagBytes = 32;

  uint64_t seq = 0;
  OpType op = OpType::kBarrier;
  DType dtype = DType::kF32;
  ReduceOp reduce_op = ReduceOp::kSum;  // kSum where the op does not reduce
  int32_t root = -1;                    // -1 where the op has none
  int32_t ndim = -1;                    // -1: not compared (barrier, all_to_all's uneven splits)
  std::array<int64_t, Shape::kMaxDims> dims{};
  std::array<char, kTagBytes> tag{};  // the call-site tag, NUL-padded, no whitespace
  uint64_t hash = 0;                  // the rolling hash after this entry
  int64_t issued_us = 0;  // when it was issued (wall clock, µs; not compared, not published)

  // What the call compares by: every field but seq and hash.
  uint64_t fingerprint() const;
  // "all_reduce(f32[4096])", "broadcast(f32[8], root 0)", "all_reduce(f32[2], max) at ddp.b3".
  std::string describe() const;
  std::string_view tag_view() const;
  void set_tag(std::string_view text);  // cut to kTagBytes - 1; whitespace becomes '_'
};

// What one rank has published: its count, its hash, its last entries.
struct LedgerRecord {
  int rank = 0;
  uint64_t count = 0;                // collectives issued: sequence numbers 0 .. count-1
  uint64_t hash = 0;                 // the rolling hash after #count-1 (0 when none)
  bool final = false;                // published at a failure: this rank issues no more
  std::vector<LedgerEntry> entries;  // the last few, in sequence order
};

// The hash of a call-site tag (0 for none), which the rolling hash folds in:
// computed once per tag by the caller that records many calls with it.
uint64_t tag_hash(const std::array<char, LedgerEntry::kTagBytes>& tag);

// A collective as the issuing thread hands it to the ledger: an entry's
// compared fields, with the dims and the tag by pointer (copied once, into
// the ring) and the tag's hash worked out beforehand.
struct LedgerCall {
  OpType op = OpType::kBarrier;
  DType dtype = DType::kF32;
  ReduceOp reduce_op = ReduceOp::kSum;
  int32_t root = -1;
  int32_t ndim = -1;
  const int64_t* dims = nullptr;                                  // ndim of them
  const std::array<char, LedgerEntry::kTagBytes>* tag = nullptr;  // null: none
  uint64_t tag_hash = 0;                                          // tag_hash(*tag); 0 for none
};

// The rolling hash and the last kKept entries of one rank in one group.
//
// Thread-safety: one thread records (the group's issuing thread: the
// sequence numbers are in its order anyway); any thread may take snapshot()
// or count() meanwhile, without stopping it. record() takes no lock and
// allocates nothing: each slot of the ring is a stamp and a few words, and
// a reader copies a slot, then checks that its stamp was the same before and
// after (a seqlock per slot; the writer clears the stamp while it rewrites
// the slot). The words are relaxed atomics, plain loads and stores on x86.
class Ledger {
 public:
  static constexpr size_t kKept = 16;

  // Records collective #seq. REQUIRES: calls in sequence order (the group's
  // issue order), from one thread at a time.
  void record(uint64_t seq, const LedgerCall& call, int64_t issued_us);
  // The same from a whole entry (its seq, fields and issue time).
  void record(const LedgerEntry& entry);
  // The count, the hash and the last entries as they stood at one moment
  // between two record() calls (fewer than kKept entries only where the
  // writer rewrote the oldest ones while they were copied).
  LedgerRecord snapshot(int rank) const;
  uint64_t count() const { return count_.load(std::memory_order_acquire); }

 private:
  static constexpr int kTagWords = LedgerEntry::kTagBytes / 8;
  // One entry: `stamp` is its seq + 1 once written whole, 0 while written.
  // Two cache lines; a call of up to 4 dims and no tag writes the first only.
  struct alignas(64) Slot {
    std::atomic<uint64_t> stamp{0};
    std::atomic<uint64_t> head{0};  // op, dtype, reduce op, ndim, a tag, root
    std::atomic<uint64_t> hash{0};
    std::atomic<int64_t> issued_us{0};
    std::atomic<int64_t> dims[Shape::kMaxDims] = {};  // the first ndim
    std::atomic<uint64_t> tag[kTagWords] = {};        // when head says it has one
  };
  bool read(uint64_t seq, LedgerEntry& out) const;

  std::atomic<uint64_t> count_{0};
  uint64_t hash_ = 0;               // the writer's alone
  std::array<Slot, kKept> ring_{};  // entry seq s at ring_[s % kKept]
};

// A record as one line of text per entry (the store's value), and back;
// decode returns nothing for text that is not a record.
std::string encode(const LedgerRecord& record);
std::optional<LedgerRecord> decode(std::string_view text);

// How the ranks' records disagree, or nothing when they agree as far as they
// can be compared. records[r] is group rank r's (nothing: not published). The
// text names the culprit, its call, the sequence number and what the others
// called: "rank 3 called all_gather(f32[1024]) as collective #812 of group
// tp, ranks 0-2 called all_reduce(f32[4096])". With `behind`, a rank that
// issued fewer collectives than the others is named as not having called the
// first one it lacks (at a failure; while the job runs, ranks are normally a
// little apart).
std::optional<std::string> find_desync(const std::vector<std::optional<LedgerRecord>>& records,
                                       std::string_view group, bool behind = true);

// "rank 3", "ranks 0-2", "ranks 0, 2, 5-7".
std::string rank_list(const std::vector<int>& ranks);

}  // namespace spmd::dist
