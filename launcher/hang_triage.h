// Hang triage: where every rank of the job stands, from the progress records
// the ranks publish in the store (runtime/progress.h), as one wavefront
// table with the culprit named on its first line:
//
//   spmdrun: hang: rank 1 never entered collective #2 of group world (all_reduce(f32[1000])), where
//   ranks 0, 2 wait
//     rank  group  op                     seq  state                  waiting on
//     0     world  all_reduce(f32[1000])  2    in the collective for  rank 1 (0/4032 B from rank 1)
//                                              5.1 s
//     1     world  -                      -    in its own code        -
//
// (the state column folded here to fit; spmdrun prints one line per rank)
//
// "waiting on" names the ranks that never entered, then, where the backend
// reported them (TCP: a collective that has waited 100 ms), the bytes it
// waits for from each peer: arrived / arrived plus posted, its header
// included.
//
// The culprit is the rank that never entered the oldest collective some
// rank waits in, or the one that entered a different op there. spmdrun
// --hang-timeout S prints it when no rank's record has moved for S seconds
// while one waits in a collective, then stops the job; after a worker died
// it is printed too, with the dead rank as the culprit. Only the world group
// is watched.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "runtime/progress.h"
#include "runtime/store.h"

namespace spmd::launcher {

// The report for `ranks` (ranks[r]: rank r's record, nothing when it has
// published none) of `group` at wall-clock time now_us. `dead_rank` >= 0:
// that rank died (`how`), and is the culprit.
std::string wavefront_report(const std::vector<std::optional<RankProgress>>& ranks,
                             const std::string& group, int64_t now_us, int dead_rank = -1,
                             const std::string& how = "");

// Reads the ranks' records of the world group of attempt `attempt` from the
// store the launcher hosts (workers use it under the prefix attempt_<N>).
std::vector<std::optional<RankProgress>> read_progress(Store& store, int attempt, int world_size);

// Watches for a hang: stalled() is true once no record has changed for
// `timeout` while some rank is in a collective.
class HangWatch {
 public:
  HangWatch(Store& store, int attempt, int world_size, std::chrono::milliseconds timeout);
  bool stalled();
  // The wavefront report of the last read.
  std::string report() const;

 private:
  Store& store_;
  int attempt_, world_size_;
  std::chrono::milliseconds timeout_;
  std::vector<std::optional<RankProgress>> last_;
  std::string last_text_;
  std::chrono::steady_clock::time_point changed_;
};

int64_t wall_clock_us();

}  // namespace spmd::launcher
