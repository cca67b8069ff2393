// Where a job stands, as the launcher reads it from the store its workers
// use: every group the ranks listed (mesh subgroups included), each
// member's progress record in it, each rank's heartbeat (runtime/progress.h
// says where the ranks write them), and, for the workers of this node, what
// the kernel says of their processes (runtime/process.h).
//
// The launcher knows nothing of tensors or groups: it reads text records.
// Groups are found through groups/<global rank>/, read once each (a listed
// group never changes); the records and heartbeats are read at every look.
// A job whose ranks listed no group (SPMD_DESYNC_CHECK=0 publishes nothing
// at all) shows only the world group, from whatever records it has.
#pragma once

#include <sys/types.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/process.h"
#include "runtime/progress.h"
#include "runtime/store.h"

namespace spmd::launcher {

struct GroupProgress {
  std::string name;                                // "world", "world/split0.1"
  std::vector<int> globals;                        // globals[k]: global rank of group rank k
  std::vector<std::optional<RankProgress>> ranks;  // by group rank; nothing: no record yet
};

struct JobProgress {
  std::vector<GroupProgress> groups;  // the world first, then in the order found
  std::vector<int64_t> beat_us;       // by global rank: the last heartbeat (0: none)
  std::vector<ProcessState> process;  // by global rank (state 0: not a worker of this node)
  // CPU time each rank's process used while nothing moved (-1: unknown),
  // and how long that was; filled in by HangWatch.
  std::vector<double> cpu_while_stalled_s;
  double stalled_s = 0;
};

class JobReader {
 public:
  // The workers of attempt `attempt` publish under "attempt_<N>/";
  // pids[g]: the pid of global rank g on this node (0 when elsewhere).
  JobReader(Store& store, int attempt, int world_size, std::vector<pid_t> pids = {});
  JobProgress read();
  // What of every record changes when a rank makes progress, as text.
  static std::string progress_text(const JobProgress& job);

 private:
  void find_groups();

  Store& store_;
  std::string prefix_;
  int world_size_;
  std::vector<pid_t> pids_;
  std::vector<int64_t> entries_read_;  // by global rank: group entries already read
  std::vector<GroupProgress> groups_;  // records empty: the directory
  std::set<std::string> names_;
};

}  // namespace spmd::launcher
