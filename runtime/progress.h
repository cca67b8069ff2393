// A rank's progress record: how far one rank has got in one process group,
// as it publishes it to the store under <group>/progress/<rank>, so that a
// launcher (which knows nothing of tensors or groups) can see a hang while
// the job runs: how many collectives the rank has issued and completed, and
// the oldest one not yet completed (what the rank is waiting in).
//
// The text form is one line:
//   spmd-progress 2 <rank> <issued> <completed> <seq> <since_us> <waiting> <op...>
// seq/since_us/op describe the collective in flight (completed < issued);
// op is "-" when none is, else what the ledger prints ("all_reduce(f32[1000])"),
// or "?" when the ledger no longer keeps it (a queue of more than
// Ledger::kKept collectives issued after it; since_us is then when the
// publisher first saw it in flight).
// waiting is what the backend reported that collective waits for, peer by
// peer, as <peer>:<received>:<expected>[,...] (bytes from that peer in this
// collective: arrived, and arrived plus posted), or "-" when it reported
// nothing (the TCP backend reports a collective that has waited 100 ms).
//
// Two more kinds of key let a launcher see every group of a job, mesh
// subgroups included, and tell a frozen process from a busy one:
//   groups/<global rank>/count   how many groups that rank has made (a
//                                counter, Store::add)
//   groups/<global rank>/<i>     the i-th (from 0), one line:
//                                  spmd-group 1 <group rank> <g0>,<g1>,... <name>
//                                (g_k: the global rank of group rank k)
//   alive/<global rank>          the wall clock (µs) of the process's last
//                                heartbeat, rewritten every kHeartbeat while
//                                the runtime's publishing thread runs
// A stopped (SIGSTOP) or frozen process publishes nothing, so a heartbeat
// older than a few intervals says "stopped or frozen" even of a rank on
// another host, whose process the launcher cannot see.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spmd {

// Bytes a collective in flight waits for from one peer.
struct PeerWait {
  int peer = 0;           // a rank of the group
  uint64_t received = 0;  // arrived from it in this collective
  uint64_t expected = 0;  // arrived plus posted (what the algorithm waits for now)
  bool operator==(const PeerWait&) const = default;
};

struct RankProgress {
  int rank = 0;
  uint64_t issued = 0;     // collectives issued: #0 .. #issued-1
  uint64_t completed = 0;  // of which completed
  uint64_t seq = 0;        // the oldest not completed (when in_flight())
  // When it was issued, to within the publishing interval (wall clock, µs
  // since the epoch).
  int64_t since_us = 0;
  std::string op = "-";           // it, as "all_reduce(f32[1000])"
  std::vector<PeerWait> waiting;  // what it waits for, when the backend said

  bool in_flight() const { return completed < issued; }
};

// One group as a member lists it.
struct GroupEntry {
  std::string name;          // "world", "world/split0.1"
  int rank = 0;              // the member's rank in it
  std::vector<int> globals;  // globals[k]: the global rank of group rank k
};

inline constexpr std::chrono::milliseconds kHeartbeat{1000};

// "<group>/progress/<rank>": where rank `rank` of `group` publishes it.
std::string progress_key(std::string_view group, int rank);
std::string encode_progress(const RankProgress& p);
// Nothing for text that is not a progress record.
std::optional<RankProgress> decode_progress(std::string_view text);

std::string group_count_key(int global_rank);
std::string group_entry_key(int global_rank, int64_t i);
std::string encode_group(const GroupEntry& g);
// Nothing for text that is not a group entry.
std::optional<GroupEntry> decode_group(std::string_view text);
std::string heartbeat_key(int global_rank);

}  // namespace spmd
