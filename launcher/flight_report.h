// The flight recorder's report: after a failure, spmdrun merges the JSON
// dumps its workers wrote (parallel/comm/flight_recorder.h, one file per rank
// and group, into the folder spmdrun named in SPMD_FLIGHT_RECORDER_DIR) into
// one file, flight_recorder.json, and one block of text for the console:
// per rank and group, its last operations in the order it issued them, how
// each ended, and why the rank dumped.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "launcher/worker_group.h"

namespace spmd::launcher {

// The folder for attempt `restart`'s dumps: `user_dir` (the launcher's own
// SPMD_FLIGHT_RECORDER_DIR) when set, else <log_root>/attempt_<restart>/flight
// when logs are written (created here), else <temp_root>/attempt_<restart>,
// `temp_root` named on first use (/tmp/spmdrun_flight_<pid>_<n>) but left for
// the first worker that needs it to create (a program that makes no group
// leaves nothing behind, even when spmdrun itself is killed).
std::string flight_dir(const std::string& user_dir, const std::string& log_root,
                       std::string& temp_root, int restart);

// After a worker failed: waits, up to `grace`, until every other worker
// that armed its flight recorder (an spmd program that made a group) has
// either ended or written a dump (a rank that sees a peer die dumps as it
// fails), routing their output meanwhile.
void wait_for_flight_dumps(WorkerGroup& group, const std::string& dir,
                           std::chrono::milliseconds grace, SignalChannel& signals);

// The dump files in `dir` (flight_rank<R>_<group>.json).
std::vector<std::string> flight_dump_files(const std::string& dir);
// Whether rank `rank` has written a dump in `dir`.
bool has_flight_dump(const std::string& dir, int rank);

// Merges the dumps in `dir` into <dir>/flight_recorder.json (a JSON array,
// ordered by rank, then group) and returns the report, at most `per_rank`
// operations per rank and group; "" when there is no dump. A file that is
// not a dump is named in the report and skipped.
std::string merge_flight_dumps(const std::string& dir, size_t per_rank = 8);

}  // namespace spmd::launcher
