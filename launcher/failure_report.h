// The failure report: what a user reads when a job dies. It names the first
// worker to fail (rank, local rank, node, pid), how (exit code, or signal by
// name, with a hint for the usual suspects), when, what became of the
// others, and the last lines the failed worker wrote.
#pragma once

#include <string>

#include "launcher/worker_group.h"

namespace spmd::launcher {

struct FailureContext {
  std::string command;  // the worker's command line, for the report
  int group_rank = 0;
  int restart = 0;  // this attempt's restart count
  int max_restarts = 0;
};

// The report for workers()[failed] of a stopped group.
std::string format_failure_report(const WorkerGroup& group, size_t failed,
                                  const FailureContext& context);

// One line for the other nodes: "rank 3 (node 1) exited with code 2".
std::string failure_summary(const Worker& worker, int group_rank);

}  // namespace spmd::launcher
