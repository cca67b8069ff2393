// The failure report: what a user reads when a job dies. It names the first
// worker to fail (rank, local rank, node, pid), how (exit code, or signal by
// name, with a hint for the usual suspects), when, what became of the
// others, the error the worker recorded in its TORCHELASTIC_ERROR_FILE (as
// torchrun's @record writes it: {"message": {"message": ..., "extraInfo":
// {"py_callstack": ..., "timestamp": ...}}}), and the last lines it wrote.
#pragma once

#include <string>

#include "launcher/worker_group.h"

namespace spmd::launcher {

struct FailureContext {
  std::string command;  // the worker's command line, for the report
  int group_rank = 0;
  int restart = 0;  // this attempt's restart count
  int max_restarts = 0;
  std::string error_file;  // the failed worker's TORCHELASTIC_ERROR_FILE
};

// The workers' TORCHELASTIC_ERROR_FILEs, <root>/attempt_<restart>/rank_<rank>/error.json.
// The root is the run's log folder when logs are written, else a temporary
// folder (/tmp/spmdrun_errors_<pid>_XXXXXX) made here and removed at
// destruction unless a worker wrote a file in it (the report names that
// file). A launcher killed by SIGKILL cannot remove its folder: the next one
// removes file-less folders whose pid is gone.
class ErrorFiles {
 public:
  explicit ErrorFiles(const std::string& log_root);
  ~ErrorFiles();
  ErrorFiles(const ErrorFiles&) = delete;
  ErrorFiles& operator=(const ErrorFiles&) = delete;

  // The file of rank `rank` in attempt `restart`.
  std::string path(int restart, int rank) const;
  // The same, with its folder created and no file left from before.
  std::string prepare(int restart, int rank) const;

 private:
  std::string root_;
  bool temporary_ = false;
};

// The report's lines for the error file at `path`: its message and Python
// call stack; "" when the worker wrote no file. A file not in torchrun's
// format is named and quoted as it is.
std::string error_file_report(const std::string& path);

// The report for workers()[failed] of a stopped group.
std::string format_failure_report(const WorkerGroup& group, size_t failed,
                                  const FailureContext& context);

// One line for the other nodes: "rank 3 (node 1) exited with code 2".
std::string failure_summary(const Worker& worker, int group_rank);

}  // namespace spmd::launcher
