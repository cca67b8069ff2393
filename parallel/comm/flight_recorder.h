// The flight recorder: a ring of the last operations one rank issued to one
// group (collectives and point-to-point), each with its sizes, when it was
// issued and ended, and how (pending, completed, failed). When a collective
// of the group fails or times out, the backend's failure path dumps it as
// JSON into SPMD_FLIGHT_RECORDER_DIR (spmdrun sets it to the run's log
// folder), one file per rank and group; spmdrun merges the files into one
// report (launcher/flight_report.h). PyTorch's flight recorder is read after
// the fact by a script; this one is read by the launcher as the job fails.
//
// SPMD_FLIGHT_RECORDER=0 turns it off; SPMD_FLIGHT_RECORDER_SIZE sets how
// many operations it keeps (default 64). Times are wall-clock microseconds
// since the epoch, so that dumps of several nodes can be laid side by side.
// The ring keeps the steady clock's (the issue time is the op's issued_at,
// which the backend reuses: one clock read for both) and snapshot() moves
// them onto the wall clock by the offset between the two clocks at that
// moment: exact unless the wall clock was stepped between an op and the
// dump, and then off by the step.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/comm/types.h"

namespace spmd::dist {

struct FlightEntry {
  enum class State : uint8_t { kPending, kCompleted, kFailed };

  uint64_t id = 0;  // this rank's count of the group's operations: their order
  OpType op = OpType::kBarrier;
  uint64_t seq = 0;    // the collective's sequence number, or send/recv's own count
  int peer = -1;       // send / recv: the other rank (-1 for collectives)
  int root = -1;       // broadcast, reduce, gather, scatter: the root (-1 for the others)
  uint64_t bytes = 0;  // the larger of the op's tensors (all_gather: the output)
  std::string dtype;   // "f32"; empty for a barrier
  State state = State::kPending;
  int64_t issued_us = 0;
  int64_t ended_us = 0;  // 0 while pending
};

std::string_view state_name(FlightEntry::State state);

class FlightRecorder {
 public:
  // Whether SPMD_FLIGHT_RECORDER leaves it on (unless "0"), and its size.
  static bool enabled_by_env();
  static size_t capacity_from_env();

  explicit FlightRecorder(size_t capacity);

  // Leaves <SPMD_FLIGHT_RECORDER_DIR>/armed_rank<R> (when the variable is
  // set): this rank will dump when a collective fails, so spmdrun waits a
  // moment for its dump after another rank has died.
  static void arm(int global_rank);

  // Records `op` as issued; returns its id, for ended().
  uint64_t issued(const CommOp& op);
  // Marks operation `id` ended (ignored once it has left the ring).
  void ended(uint64_t id, bool ok);
  // Marks collective #seq ended, likewise: for an observer that keeps the
  // sequence number rather than the id.
  void ended_collective(uint64_t seq, bool ok);
  // The entries kept, oldest first.
  std::vector<FlightEntry> snapshot() const;

  // The dump as JSON: {"rank", "group", "group_rank", "group_size", "reason",
  // "dumped_us", "ops": [{"id", "op", "seq", "peer", "root", "bytes", "dtype",
  // "state", "issued_us", "ended_us"}, ...]}. `failed_seq`: the collective
  // that failed, recorded as failed (its Work completes after the dump).
  std::string to_json(int global_rank, const std::string& group, int group_rank, int group_size,
                      const std::string& reason, int64_t failed_seq) const;
  // Writes to_json() to <SPMD_FLIGHT_RECORDER_DIR>/flight_rank<global>_<group>.json
  // (the group's '/' as '.'); returns the path, or "" when the variable is
  // unset or the file cannot be written.
  std::string dump(int global_rank, const std::string& group, int group_rank, int group_size,
                   const std::string& reason, int64_t failed_seq) const;

 private:
  void end_locked(uint64_t id, bool ok, int64_t t);

  mutable std::mutex mu_;
  std::vector<FlightEntry> ring_;         // entry id at ring_[id % capacity]
  std::vector<uint64_t> collective_ids_;  // collective #seq's id at [seq % capacity]
  uint64_t next_id_ = 0;
};

}  // namespace spmd::dist
