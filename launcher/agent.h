// The agent: what spmdrun does on one node, from start to exit code.
//
//   rendezvous (round r)  ->  start the workers  ->  monitor them
//        ^                                             |
//        |   a failure here or on another node,       |  all succeeded:
//        +-- restarts left: stop all, r + 1  <---------+  wait for the other
//                                                         nodes, exit 0
//
// Monitoring is one poll() loop over the workers' output pipes and the
// launcher's signals; every --monitor-interval it also asks the store whether
// another node reported a failure. A failure stops every worker (SIGTERM,
// then SIGKILL after --stop-grace), prints the report, and tells the other
// nodes. A signal to the launcher is forwarded to the workers the same way.
// Nothing the workers start outlives the job: the launcher adopts their
// orphans (descendants.h), and a guardian process ends their process groups
// if the launcher is killed with SIGKILL (guardian.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launcher/failure_report.h"
#include "launcher/guardian.h"
#include "launcher/node_rendezvous.h"
#include "launcher/options.h"
#include "launcher/signals.h"
#include "launcher/worker_group.h"

namespace spmd::launcher {

class Agent {
 public:
  Agent(const LaunchOptions& options, SignalChannel& signals);

  // Runs the job to its end. Returns the launcher's exit code: 0 when every
  // worker of the last attempt succeeded, 1 after a failure with no restart
  // left, 128 + N after signal N. Throws Error for a setup failure (program
  // missing, port taken, rendezvous timeout) and Interrupted for a signal
  // that arrived while no worker ran.
  int run();
  // Removes the flight recorder's temporary folder when no dump landed in it.
  ~Agent();

 private:
  enum class Outcome { kSucceeded, kLocalFailure, kRemoteFailure, kSignaled, kHung };

  std::vector<WorkerSetup> worker_setups(const NodeAssignment& a, int restart);
  OutputRoute route(int local_rank, int rank, int restart, int stream_bit);
  Outcome monitor(WorkerGroup& group, NodeRendezvous& rdzv, int round);
  Outcome exit_barrier(NodeRendezvous& rdzv, int round, int group_rank);
  void on_local_failure(WorkerGroup& group, NodeRendezvous& rdzv, int round, int group_rank);
  void on_hang(WorkerGroup& group, NodeRendezvous& rdzv, int round, int group_rank);
  std::vector<pid_t> worker_pids(const WorkerGroup& group) const;
  bool run_preflight(const NodeAssignment& a, NodeRendezvous& rdzv);

  const LaunchOptions& options_;
  SignalChannel& signals_;
  WorkerCommand command_;
  std::vector<std::string> base_env_;  // the launcher's environment minus what spmdrun sets
  Guardian guardian_;                  // forked before any worker (guardian.h)
  std::string log_root_;               // <log dir>/<run id>, when logs are written
  std::string agent_store_;            // "host:port" of the store, the workers' SPMD_AGENT_STORE
  std::string remote_failure_;         // what another node reported
  int world_size_ = 0;                 // this round's
  std::string hang_report_;            // --hang-timeout's wavefront table (hang_triage.h)
  // The flight recorder (launcher/flight_report.h): the user's folder, the
  // temporary one spmdrun made (when no log folder), this attempt's.
  std::string flight_user_dir_, flight_temp_root_, flight_dir_;
  // Where each worker's TORCHELASTIC_ERROR_FILE lies (launcher/failure_report.h).
  std::optional<ErrorFiles> error_files_;
};

}  // namespace spmd::launcher
