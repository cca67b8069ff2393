// Hang triage: where every rank of the job stands, in every group it has
// made (launcher/job_progress.h), as one table with the stuck rank named on
// its first line:
//
//   spmdrun: hang: rank 1 never entered collective #12 of group world/split0.0
//   (all_gather(f32[4096])), where rank 0 waits; its process is stopped (state T:
//   SIGSTOP, or a debugger)
//     rank  process             group           op                 seq  state              waiting
//     on 0     asleep (state S)    world/split0.0  all_gather(f32...  12   in the collective  rank
//     1 (0/16416
//                                                                       for 10.2 s         B from
//                                                                       rank 1)
//     1     stopped (state T..  -               -                  -    in its own code    -
//                                                                       (#0-#11 done)
//
// (folded here to fit; spmdrun prints one line per rank)
//
// Who waits on whom: a rank in a collective waits on the members of its
// group that never entered it (no record, or fewer issued), and failing
// those on the peers whose bytes the backend says it still expects (TCP and
// shared memory report a collective that has waited 100 ms: arrived /
// arrived plus posted, header included). The stuck ranks are the ones waited
// on that wait on nobody themselves: in their own code, or still inside a
// collective their peers have completed. A rank whose process is stopped is
// named whatever else holds, and the headline says what the kernel says of
// each stuck rank's process (this node's workers: stopped, asleep, running
// and how much CPU it used while nothing moved) or, for a rank on another
// node, how long its heartbeat has been silent.
//
// spmdrun --hang-timeout S prints it when no rank has made progress in any
// group for S seconds (no collective completed, none entered from a rank's
// own code, no bytes arrived) while one waits in a collective, then stops the job;
// after a worker died it is printed too, with the dead rank as the culprit.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "launcher/job_progress.h"
#include "runtime/store.h"

namespace spmd::launcher {

// The report for `job` at wall-clock time now_us. `dead_rank` >= 0: that
// rank died (`how`), and is the culprit.
std::string wavefront_report(const JobProgress& job, int64_t now_us, int dead_rank = -1,
                             const std::string& how = "");

// Watches for a hang: stalled() is true once no rank has made progress (see
// above) for `timeout` while some rank is in a collective.
class HangWatch {
 public:
  // pids[g]: the pid of global rank g when it is a worker of this node.
  HangWatch(Store& store, int attempt, int world_size, std::chrono::milliseconds timeout,
            std::vector<pid_t> pids);
  bool stalled();
  // The wavefront report of the last read.
  std::string report();

 private:
  JobReader reader_;
  std::chrono::milliseconds timeout_;
  JobProgress last_;
  std::string last_text_;
  std::vector<double> cpu_at_change_;  // each process's CPU time when a record last moved
  std::chrono::steady_clock::time_point changed_;
};

int64_t wall_clock_us();

}  // namespace spmd::launcher
