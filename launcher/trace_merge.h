// The job's trace: with SPMD_TRACE=dir each rank writes dir/trace_rank<R>.json
// (runtime/trace.h); when an attempt ends, successfully or not, spmdrun
// merges its node's files into one that Perfetto and chrome://tracing open,
// one process row per rank (ordered by rank), on the ranks' common clock
// (wall-clock microseconds since the epoch). On one node that is
// dir/trace.json, the whole job; with several nodes each launcher merges the
// ranks it started into dir/trace_node<N>.json, and says so (a launcher reads
// only its own node's files; the node files lay together as they are).
#pragma once

#include <string>
#include <vector>

namespace spmd::launcher {

struct TraceMerge {
  std::string path;              // the merged file ("" when nothing was merged)
  std::vector<int> merged;       // ranks whose file was read
  std::vector<int> missing;      // ranks with no file (killed before they wrote it)
  std::vector<std::string> bad;  // files that did not parse, with the reason
};

// Removes dir/trace_rank<R>.json for R in [first_rank, first_rank + count),
// so that an attempt never merges an earlier run's file for a rank that
// wrote none.
void clear_rank_traces(const std::string& dir, int first_rank, int count);

// Merges dir/trace_rank<R>.json for R in [first_rank, first_rank + count)
// into `dir`/`file_name`. Node `node` of `nodes` is recorded in the file.
TraceMerge merge_rank_traces(const std::string& dir, int first_rank, int count, int node, int nodes,
                             const std::string& file_name);

// The console lines for a merge: where the file is and what it holds.
std::string describe_trace_merge(const TraceMerge& merge, int node, int nodes);

}  // namespace spmd::launcher
