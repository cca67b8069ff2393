// DesyncCheck: one rank's ledger (ledger.h) for one group, published to the
// group's store so that, when a collective fails, the rank that sees it can
// say which rank issued what. Backend-independent: the ProcessGroup records
// each collective at issue; a backend calls diagnose() from its failure path
// (a timeout, or peers that disagree) and adds the line to its error.
//
// Publishing: a thread of this object writes the rank's record under
// <group>/ledger/<rank> every interval when it has changed (the issuing
// thread never talks to the store), and diagnose() writes it once more,
// marked final. So a rank that never reaches a collective (busy or stuck in
// its own code) still shows how far it got.
//
// What a collective costs its own threads is a few stores: record() fills a
// slot of the ledger (no lock, no allocation, no clock read: the entry's
// issue time is the publisher's last wake, up to about an interval early), and
// completed() a slot of its own. Counting, encoding and the store are the
// publisher's.
//
// The same thread publishes the rank's progress record (runtime/progress.h:
// collectives issued and completed, the one in flight) under
// <group>/progress/<rank>, which spmdrun --hang-timeout watches. At
// construction the rank lists the group under groups/<global rank>/, so the
// launcher finds mesh subgroups too; the check of a root group (one made
// without global ranks: the world) also writes the process's heartbeat,
// alive/<global rank>, every second.
//
// While the job runs, rank 0's thread also compares every rank's published
// record every 5 intervals (when its own has moved), so that ranks whose
// calls differ where the wire cannot tell (the same op and shape from
// different call-site tags) are reported too: logged once at error level and
// stored under <group>/desync. The collectives themselves go on.
//
// SPMD_DESYNC_CHECK=0 turns it off (nothing recorded or published);
// SPMD_DESYNC_INTERVAL_MS sets the interval (default 200).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "parallel/comm/ledger.h"
#include "runtime/progress.h"
#include "runtime/store.h"

namespace spmd::dist {

class DesyncCheck {
 public:
  // Whether SPMD_DESYNC_CHECK leaves the check on (it is unless "0").
  static bool enabled_by_env();

  // `prefix` is the group's key prefix ("<group>/"); `group` its name for
  // messages; `global_ranks[k]` the global rank of group rank k (empty: a
  // root group, whose ranks are the global ones).
  DesyncCheck(std::shared_ptr<Store> store, std::string prefix, std::string group, int rank,
              int size, std::vector<int> global_ranks = {});
  ~DesyncCheck();  // stops the publisher
  DesyncCheck(const DesyncCheck&) = delete;
  DesyncCheck& operator=(const DesyncCheck&) = delete;

  // Records a collective as issued (op.seq in issue order), with the call-site tag.
  // REQUIRES: one thread at a time (the group's issuing thread).
  void record(const CommOp& op, std::string_view tag);
  // Marks collective #seq completed successfully, from whichever thread
  // completes it; one that failed stays in flight in the progress record:
  // where the rank stood. A plain store into a slot of its own, no
  // read-modify-write shared by the completing threads (that was a third of
  // the ledger's cost per call): the publisher counts the completed ones.
  void completed(uint64_t seq) { done_[seq % kDone].store(seq + 1, std::memory_order_relaxed); }
  // What collective #seq waits for, as the backend sees it (its progress
  // record carries it while #seq is the one in flight).
  void note_waiting(uint64_t seq, std::vector<PeerWait> waiting);
  const Ledger& ledger() const { return ledger_; }

  // Publishes this rank's record (final), reads the others', waiting up to
  // `grace` for ranks that have not yet reached collective #seq to publish
  // theirs, and returns how the ranks disagree (empty when they do not, as
  // far as the records tell). The first rank to find a disagreement also
  // logs it and stores it under <group>/desync. A rank whose record stops
  // short of #seq and whose heartbeat is silent is not said to be behind:
  // it may have called #seq and stopped before publishing (the line says so).
  std::string diagnose(uint64_t seq, std::chrono::milliseconds grace);
  // Publishes this rank's record, final (a failure that needs no diagnosis,
  // such as a lost peer, so that the others need not wait for it).
  void publish_final();

 private:
  void publish(bool final);
  void publish_progress();
  void list_group();  // under groups/<global rank>/
  void beat();        // alive/<global rank>, for a root group, every kHeartbeat
  // "rank 1 has been silent for 14.8 s ..." for the ranks of `late` whose
  // heartbeat is older than a few intervals; "" when none is.
  std::string silent_ranks(const std::vector<int>& late,
                           const std::vector<std::optional<LedgerRecord>>& records, uint64_t seq);
  uint64_t count_completed(uint64_t issued);
  void compare_records();  // rank 0, while the job runs
  void publisher_loop();

  std::shared_ptr<Store> store_;
  std::string prefix_, group_;
  int rank_, size_;
  std::vector<int> globals_;  // globals_[k]: the global rank of group rank k
  bool root_;                 // made without global ranks: this check beats
  Ledger ledger_;
  std::chrono::milliseconds interval_;
  // The wall clock (µs) at the publisher's last wake: each entry's issue
  // time, up to one interval early, for the price of a load.
  std::atomic<int64_t> tick_us_;
  // The issuing thread's alone: the last call-site tag, as given, cleaned
  // and hashed.
  std::string tag_text_;
  std::array<char, LedgerEntry::kTagBytes> tag_{};
  uint64_t tag_hash_ = 0;
  // done_[s % kDone]: one past the last collective ≡ s (mod kDone) that
  // completed. Written by the threads that complete collectives, not the one
  // that records them: on cache lines apart from the ledger's.
  static constexpr size_t kDone = 64;
  alignas(64) std::array<std::atomic<uint64_t>, kDone> done_{};
  uint64_t completed_ = 0;  // collectives #0 .. #completed_-1 done (publisher thread only)
  std::string progress_;    // the progress record last published (publisher thread only)
  // The collective last seen in flight and the tick it was first seen at:
  // its issue time when the ledger no longer keeps its entry (publisher only).
  uint64_t seen_seq_ = UINT64_MAX;
  int64_t seen_us_ = 0;
  std::chrono::steady_clock::time_point beaten_{};  // the last heartbeat (publisher only)
  uint64_t compared_ = 0;  // the count at rank 0's last comparison (publisher thread only)
  int wakes_ = 0;
  bool reported_ = false;

  std::mutex publish_mu_;  // one publish at a time
  std::mutex mu_;          // guards the fields below
  std::condition_variable cv_;
  bool stop_ = false;
  bool final_ = false;                 // published final: the publisher stops writing
  uint64_t waiting_seq_ = UINT64_MAX;  // the collective note_waiting() last described
  std::vector<PeerWait> waiting_;
  uint64_t published_ = 0;  // the count last published (UINT64_MAX: none)
  std::thread publisher_;
};

}  // namespace spmd::dist
