// The agent's life: set-up, then rounds of rendezvous, start, monitor, and
// either exit or restart.
#include "launcher/agent.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "launcher/console_writer.h"
#include "launcher/descendants.h"
#include "launcher/failure_report.h"
#include "launcher/flight_report.h"
#include "launcher/hang_triage.h"
#include "launcher/trace_merge.h"
#include "runtime/error.h"
#include "runtime/logging.h"
#include "runtime/process.h"

extern char** environ;

namespace spmd::launcher {
namespace {

using Ms = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// The variables spmdrun sets for each worker; the launcher's own values of
// them (it may itself run under a launcher) are not passed on.
constexpr const char* kWorkerVars[] = {"RANK",
                                       "LOCAL_RANK",
                                       "WORLD_SIZE",
                                       "LOCAL_WORLD_SIZE",
                                       "GROUP_RANK",
                                       "GROUP_WORLD_SIZE",
                                       "ROLE_RANK",
                                       "ROLE_WORLD_SIZE",
                                       "ROLE_NAME",
                                       "MASTER_ADDR",
                                       "MASTER_PORT",
                                       "TORCHELASTIC_RESTART_COUNT",
                                       "TORCHELASTIC_MAX_RESTARTS",
                                       "TORCHELASTIC_RUN_ID",
                                       "TORCHELASTIC_ERROR_FILE",
                                       "SPMD_AGENT_STORE",
                                       "SPMD_STORE_LISTEN_FD"};

// Merges this node's trace files (trace_merge.h) when an attempt ends,
// however it ends: declared before the attempt's WorkerGroup, it runs after
// the workers are gone.
class TraceAtAttemptEnd {
 public:
  TraceAtAttemptEnd(std::string dir, const NodeAssignment& a) : dir_(std::move(dir)), a_(a) {
    if (!dir_.empty()) clear_rank_traces(dir_, a_.rank_offset, a_.local_world_size);
  }
  ~TraceAtAttemptEnd() {
    if (dir_.empty()) return;
    const int node = a_.group_rank, nodes = a_.group_world_size;
    const std::string name = nodes > 1 ? str_cat("trace_node", node, ".json") : "trace.json";
    try {
      TraceMerge m =
          merge_rank_traces(dir_, a_.rank_offset, a_.local_world_size, node, nodes, name);
      ConsoleWriter::say(describe_trace_merge(m, node, nodes));
    } catch (const std::exception& e) {  // a destructor: report, never throw
      ConsoleWriter::say(str_cat("spmdrun: trace not merged: ", e.what(), "\n"));
    }
  }
  TraceAtAttemptEnd(const TraceAtAttemptEnd&) = delete;
  TraceAtAttemptEnd& operator=(const TraceAtAttemptEnd&) = delete;

 private:
  std::string dir_;  // SPMD_TRACE; empty: tracing is off
  NodeAssignment a_;
};

std::vector<std::string> launcher_env() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string var = *e;
    std::string name = var.substr(0, var.find('='));
    bool ours = std::any_of(std::begin(kWorkerVars), std::end(kWorkerVars),
                            [&](const char* v) { return name == v; });
    if (!ours) env.push_back(var);
  }
  return env;
}

Ms ms(double seconds) { return Ms(static_cast<int64_t>(seconds * 1000)); }

bool writes_files(const StreamSelection& s) {
  if (s.all != 0) return true;
  for (const auto& [rank, bits] : s.per_local_rank)
    if (bits != 0) return true;
  return false;
}

std::string command_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    out += a.find(' ') == std::string::npos && !a.empty() ? a : "'" + a + "'";
  }
  return out;
}

void say(const std::string& line) { ConsoleWriter::say("spmdrun: " + line + "\n"); }

}  // namespace

// ---- set-up ----

Agent::Agent(const LaunchOptions& options, SignalChannel& signals)
    : options_(options),
      signals_(signals),
      command_(resolve_command(options.program, options.args)),
      base_env_(launcher_env()),
      guardian_(2 * static_cast<size_t>(options.nproc_per_node) + 16) {
  become_subreaper();  // the workers' orphans are re-parented here (descendants.h)
  if (!std::getenv("OMP_NUM_THREADS") && options.nproc_per_node > 1) {
    base_env_.push_back("OMP_NUM_THREADS=1");
    say(str_cat("OMP_NUM_THREADS is not set: each worker gets OMP_NUM_THREADS=1 so that ",
                options.nproc_per_node,
                " workers do not overload the cores (set it yourself to tune)"));
  }
  if (writes_files(options.redirects) || writes_files(options.tee)) {
    std::string dir = options.log_dir;
    if (dir.empty()) {
      char tmpl[] = "/tmp/spmdrun_logs_XXXXXX";
      SPMD_CHECK(::mkdtemp(tmpl) != nullptr, "cannot create a log folder: ", std::strerror(errno));
      dir = tmpl;
      say("no --log-dir given: worker logs go to " + dir);
    }
    log_root_ = (std::filesystem::path(dir) / options.run_id).string();
  }
  if (const char* dir = std::getenv("SPMD_FLIGHT_RECORDER_DIR")) flight_user_dir_ = dir;
  error_files_.emplace(log_root_);
}

Agent::~Agent() {
  std::error_code ec;
  if (flight_temp_root_.empty() || !std::filesystem::exists(flight_temp_root_, ec)) return;
  for (const auto& attempt : std::filesystem::directory_iterator(flight_temp_root_, ec)) {
    if (!flight_dump_files(attempt.path().string()).empty()) return;  // kept for the user
  }
  std::filesystem::remove_all(flight_temp_root_, ec);
}

std::vector<WorkerSetup> Agent::worker_setups(const NodeAssignment& a, int restart) {
  std::vector<WorkerSetup> setups;
  flight_dir_ = flight_dir(flight_user_dir_, log_root_, flight_temp_root_, restart);
  for (int lr = 0; lr < a.local_world_size; ++lr) {
    WorkerSetup s;
    s.local_rank = lr;
    s.rank = a.rank_offset + lr;
    s.env = base_env_;
    auto set = [&](const char* name, auto value) { s.env.push_back(str_cat(name, "=", value)); };
    set("RANK", s.rank);
    set("LOCAL_RANK", lr);
    set("WORLD_SIZE", a.world_size);
    set("LOCAL_WORLD_SIZE", a.local_world_size);
    set("GROUP_RANK", a.group_rank);
    set("GROUP_WORLD_SIZE", a.group_world_size);
    set("ROLE_RANK", s.rank);
    set("ROLE_WORLD_SIZE", a.world_size);
    set("ROLE_NAME", options_.role);
    set("MASTER_ADDR", a.master_addr);  // for the program's own use: spmdrun binds nothing there
    set("MASTER_PORT", a.master_port);
    set("TORCHELASTIC_RESTART_COUNT", restart);
    set("TORCHELASTIC_MAX_RESTARTS", options_.max_restarts);
    set("TORCHELASTIC_RUN_ID", options_.run_id);
    set("SPMD_AGENT_STORE", agent_store_);  // where spmd workers meet
    if (flight_user_dir_.empty()) set("SPMD_FLIGHT_RECORDER_DIR", flight_dir_);
    set("TORCHELASTIC_ERROR_FILE", error_files_->prepare(restart, s.rank));
    s.stdout_route = route(lr, s.rank, restart, kStdoutBit);
    s.stderr_route = route(lr, s.rank, restart, kStderrBit);
    setups.push_back(std::move(s));
  }
  return setups;
}

OutputRoute Agent::route(int local_rank, int rank, int restart, int stream_bit) {
  bool redirect = options_.redirects.includes(local_rank, stream_bit);
  bool tee = options_.tee.includes(local_rank, stream_bit);
  const auto& filter = options_.local_ranks_filter;
  bool shown = !filter || std::find(filter->begin(), filter->end(), local_rank) != filter->end();
  OutputRoute r;
  r.console = !redirect && shown;
  if ((redirect || tee) && !log_root_.empty()) {
    r.file_path = str_cat(log_root_, "/attempt_", restart, "/rank_", rank, "/",
                          stream_bit == kStdoutBit ? "stdout.log" : "stderr.log");
  }
  return r;
}

// ---- the rounds ----

int Agent::run() {
  NodeRendezvous rdzv(options_, [this] { signals_.throw_if_interrupted(); });
  const std::string& host = rdzv.store_host();  // an IPv6 host in brackets: "[::1]:port"
  agent_store_ = host.find(':') == std::string::npos ? str_cat(host, ":", rdzv.store_port())
                                                     : str_cat("[", host, "]:", rdzv.store_port());
  for (int round = 0;; ++round) {
    NodeAssignment a = rdzv.join(round);
    SPMD_LOG_INFO("node ", a.group_rank, " of ", a.group_world_size, ": ranks ", a.rank_offset,
                  "..", a.rank_offset + a.local_world_size - 1, " of ", a.world_size, ", restart ",
                  round);
    world_size_ = a.world_size;
    if (options_.preflight && round == 0 && !run_preflight(a, rdzv)) return 1;
    const char* trace_dir = std::getenv("SPMD_TRACE");  // the workers inherit it
    TraceAtAttemptEnd trace(trace_dir ? trace_dir : "", a);
    WorkerGroup group(command_, worker_setups(a, round), &guardian_);
    Outcome outcome;
    try {
      outcome = monitor(group, rdzv, round);
      if (outcome == Outcome::kSucceeded && options_.nnodes > 1)
        outcome = exit_barrier(rdzv, round, a.group_rank);
    } catch (const Error& e) {  // the store is gone: nothing coordinates the job any more
      say(str_cat("lost the store (", e.what(), "); stopping the workers"));
      group.stop(SIGTERM, ms(options_.stop_grace_s), signals_);
      throw;
    }
    if (outcome == Outcome::kSucceeded) return 0;
    if (outcome == Outcome::kSignaled) {
      int sig = signals_.take_termination();
      say(str_cat("received ", signal_name(sig), ": forwarding it to the workers"));
      try {
        rdzv.report_failure(
            round, str_cat("node ", a.group_rank, "'s launcher received ", signal_name(sig)));
      } catch (const Error&) {
      }
      group.stop(sig, ms(options_.stop_grace_s), signals_);
      return 128 + sig;
    }
    if (outcome == Outcome::kLocalFailure) {
      on_local_failure(group, rdzv, round, a.group_rank);
    } else if (outcome == Outcome::kHung) {
      on_hang(group, rdzv, round, a.group_rank);
    } else {
      say("another node failed (" + remote_failure_ + "): stopping the workers");
      group.stop(SIGTERM, ms(options_.stop_grace_s), signals_);
    }
    if (signals_.has_termination()) return 128 + signals_.take_termination();
    if (round >= options_.max_restarts) return 1;
    say(str_cat("restarting the workers (restart ", round + 1, " of ", options_.max_restarts, ")"));
  }
}

Agent::Outcome Agent::monitor(WorkerGroup& group, NodeRendezvous& rdzv, int round) {
  Ms interval = options_.nnodes > 1 ? ms(options_.monitor_interval_s) : Ms(1000);
  auto next_check = Clock::now() + interval;
  std::optional<HangWatch> hang;
  if (options_.hang_timeout_s > 0 && rdzv.hosting()) {  // the node that hosts the store watches
    hang.emplace(rdzv.worker_store(), round, world_size_, ms(options_.hang_timeout_s),
                 worker_pids(group));
  }
  auto next_hang_check = Clock::now();
  for (;;) {
    group.pump(interval, signals_);
    if (signals_.has_termination()) return Outcome::kSignaled;
    if (group.first_failure()) return Outcome::kLocalFailure;
    if (group.all_exited()) {
      group.drain_output(Ms(1000), signals_);
      return Outcome::kSucceeded;
    }
    if (hang && Clock::now() >= next_hang_check) {
      next_hang_check = Clock::now() + Ms(250);
      if (hang->stalled()) {
        hang_report_ = hang->report();
        return Outcome::kHung;
      }
    }
    if (options_.nnodes > 1 && Clock::now() >= next_check) {
      if (std::optional<std::string> f = rdzv.failure(round)) {
        remote_failure_ = *f;
        return Outcome::kRemoteFailure;
      }
      next_check = Clock::now() + interval;
    }
  }
}

void Agent::on_local_failure(WorkerGroup& group, NodeRendezvous& rdzv, int round, int group_rank) {
  size_t failed = *group.first_failure();
  if (options_.nnodes > 1) {
    try {  // first, so the other nodes start stopping while this one does
      rdzv.report_failure(round, failure_summary(group.workers()[failed], group_rank));
    } catch (const Error& e) {
      SPMD_LOG_WARN("could not tell the other nodes: ", e.what());
    }
  }
  // The others often fail a moment later (a peer died) and dump their flight recorders.
  wait_for_flight_dumps(group, flight_dir_, Ms(3000), signals_);
  std::string wavefront;  // where each rank stood, from the progress records (hang_triage.h)
  if (rdzv.hosting()) {
    try {
      const Worker& dead = group.workers()[failed];
      const JobProgress job =
          JobReader(rdzv.worker_store(), round, world_size_, worker_pids(group)).read();
      bool any = false;
      for (const GroupProgress& g : job.groups) {
        for (const auto& p : g.ranks) any = any || p.has_value();
      }
      if (any)
        wavefront =
            wavefront_report(job, wall_clock_us(), dead.rank, describe_wait_status(dead.status));
    } catch (const Error&) {
    }
  }
  group.stop(SIGTERM, ms(options_.stop_grace_s), signals_);
  FailureContext context{command_line(command_.argv), group_rank, round, options_.max_restarts,
                         error_files_->path(round, group.workers()[failed].rank)};
  ConsoleWriter::say(format_failure_report(group, failed, context) + wavefront +
                     merge_flight_dumps(flight_dir_));  // queued after the workers' lines
}

// By global rank: the pid of each worker of this node (0 for the others').
std::vector<pid_t> Agent::worker_pids(const WorkerGroup& group) const {
  std::vector<pid_t> pids(world_size_, 0);
  for (const Worker& w : group.workers()) {
    if (w.rank >= 0 && w.rank < world_size_) pids[w.rank] = w.pid;
  }
  return pids;
}

void Agent::on_hang(WorkerGroup& group, NodeRendezvous& rdzv, int round, int group_rank) {
  ConsoleWriter::say(str_cat("spmdrun: no rank made progress for ", options_.hang_timeout_s,
                             " s (--hang-timeout) while one waits in a collective; stopping the "
                             "job\n",
                             hang_report_));
  if (options_.nnodes > 1) {
    try {
      rdzv.report_failure(round, str_cat("node ", group_rank, " saw a hang: ",
                                         hang_report_.substr(0, hang_report_.find('\n'))));
    } catch (const Error& e) {
      SPMD_LOG_WARN("could not tell the other nodes: ", e.what());
    }
  }
  group.stop(SIGTERM, ms(options_.stop_grace_s), signals_);
}

// spmd-preflight (launcher/preflight/) on every rank of this node, with the
// workers' environment; true when every one passed.
bool Agent::run_preflight(const NodeAssignment& a, NodeRendezvous& rdzv) {
  std::string program =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "spmd-preflight").string();
  if (const char* p = std::getenv("SPMD_PREFLIGHT_PROGRAM")) program = p;
  const WorkerCommand job = command_;
  command_ = resolve_command(program, {});
  Outcome outcome;
  {
    WorkerGroup group(command_, worker_setups(a, 0), &guardian_);
    outcome = monitor(group, rdzv, 0);
    if (outcome != Outcome::kSucceeded) group.stop(SIGTERM, ms(options_.stop_grace_s), signals_);
    if (outcome == Outcome::kLocalFailure) {
      const Worker& w = group.workers()[*group.first_failure()];
      say(str_cat("preflight failed on rank ", w.rank, " (", describe_wait_status(w.status),
                  "; its report is above): the program was not started"));
    }
  }
  command_ = job;
  if (outcome == Outcome::kSucceeded) {
    say(str_cat("preflight passed on ranks ", a.rank_offset, "..",
                a.rank_offset + a.local_world_size - 1));
    return true;
  }
  if (outcome != Outcome::kLocalFailure)
    say("preflight did not finish: the program was not started");
  return false;
}

Agent::Outcome Agent::exit_barrier(NodeRendezvous& rdzv, int round, int group_rank) {
  // Node 0 hosts the store: it must not leave before the others are done with it.
  rdzv.mark_done(round, group_rank);
  auto deadline = Clock::now() + ms(options_.rdzv_timeout_s);
  for (;;) {
    if (rdzv.all_done(round)) return Outcome::kSucceeded;
    if (std::optional<std::string> f = rdzv.failure(round)) {
      remote_failure_ = *f;
      return Outcome::kRemoteFailure;
    }
    if (Clock::now() >= deadline) {
      say("not every node finished within --rdzv-timeout; leaving anyway");
      return Outcome::kSucceeded;
    }
    pollfd p{signals_.fd(), POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(ms(options_.monitor_interval_s).count()));
    signals_.drain();
    if (signals_.has_termination()) return Outcome::kSignaled;
  }
}

}  // namespace spmd::launcher
