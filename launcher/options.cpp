// spmdrun's flags. The help text of each is the documentation a user sees
// first, so it says what the flag does and what torchrun habit it keeps.
#include "launcher/options.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
#include <sstream>

#include "launcher/worker_group.h"
#include "runtime/error.h"
#include "runtime/flag_checks.h"
#include "runtime/resource_limits.h"

namespace spmd::launcher {
namespace {

int parse_int(const std::string& text, const std::string& what) {
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  SPMD_CHECK(!text.empty() && *end == '\0' && v >= 0 && v < (1L << 30), what, ": '", text,
             "' is not a non-negative integer");
  return static_cast<int>(v);
}

std::vector<std::string> split(const std::string& text, char sep);

// The GPUs a worker could use: CUDA_VISIBLE_DEVICES's entries when it is set
// (as CUDA counts them: up to the first that is not a device, such as -1),
// else the /dev/nvidiaN devices.
int count_gpus() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    int n = 0;
    for (const std::string& entry : split(visible, ',')) {
      if (entry.empty() || entry[0] == '-') break;
      ++n;
    }
    return n;
  }
  int n = 0;
  for (int i = 0; i < 64; ++i)
    if (std::filesystem::exists("/dev/nvidia" + std::to_string(i))) ++n;
  return n;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, sep);) out.push_back(item);
  return out;
}

// A run id for --standalone jobs, which have no id of their own.
std::string random_id() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

// --nnodes N (or torchrun's elastic MIN:MAX, accepted when MIN == MAX).
int parse_nnodes(const std::string& text) {
  size_t colon = text.find(':');
  if (colon == std::string::npos) return parse_int(text, "--nnodes");
  int lo = parse_int(text.substr(0, colon), "--nnodes");
  int hi = parse_int(text.substr(colon + 1), "--nnodes");
  SPMD_CHECK(lo == hi, "--nnodes ", text,
             ": elastic ranges are not supported (spmdrun runs a fixed number of nodes, "
             "without elastic membership); give one number, --nnodes N or N:N");
  return lo;
}

void check_options(const LaunchOptions& o) {
  SPMD_CHECK(o.nnodes >= 1, "--nnodes must be at least 1, not ", o.nnodes);
  SPMD_CHECK(o.nproc_per_node >= 1, "--nproc-per-node must be at least 1, not ", o.nproc_per_node);
  SPMD_CHECK(o.node_rank < o.nnodes, "--node-rank ", o.node_rank, " is not below --nnodes ",
             o.nnodes);
  SPMD_CHECK(!o.standalone || o.nnodes == 1, "--standalone runs one node, but --nnodes is ",
             o.nnodes);
  SPMD_CHECK(o.master_port >= 1 && o.master_port <= 65535, "--master-port ", o.master_port,
             " is not in 1..65535 (use --standalone for a free port)");
  SPMD_CHECK(o.rdzv_timeout_s > 0, "--rdzv-timeout must be positive");
  // Each worker keeps two pipes and about two store connections open here.
  check_process_limits(str_cat("--nproc-per-node ", o.nproc_per_node), o.nproc_per_node, 4);
  SPMD_CHECK(o.monitor_interval_s > 0, "--monitor-interval must be positive");
  SPMD_CHECK(o.stop_grace_s >= 0, "--stop-grace must not be negative");
  SPMD_CHECK(o.hang_timeout_s >= 0, "--hang-timeout must not be negative (0: off)");
  SPMD_CHECK(o.max_restarts >= 0, "--max-restarts must not be negative");
  SPMD_CHECK(!o.program.empty(), "no program to run (usage: spmdrun [options] PROGRAM [ARGS...])");
  SPMD_CHECK(o.program[0] != '-', "unknown option '", o.program, "' (see spmdrun --help)");
  SPMD_CHECK(!o.role.empty(),
             "--role: give the role a name (the workers' ROLE_NAME; torchrun's "
             "default is 'default')");
  SPMD_CHECK(!(o.module && o.no_python),
             "-m runs a Python module and --no-python runs no Python: give one of them");
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The interpreter for .py programs and -m: $PYTHON_EXEC, as torchrun reads
// it (a path, or a name looked up in PATH), else the first python3 in PATH.
// Throws InvalidArgument when PYTHON_EXEC names nothing that can be executed.
std::string python_interpreter() {
  const char* exec = std::getenv("PYTHON_EXEC");
  if (!exec) return "python3";
  const char* why =
      " (PYTHON_EXEC names the interpreter of .py programs and -m, as under "
      "torchrun; unset it to use python3 from PATH)";
  SPMD_CHECK(*exec != '\0', "PYTHON_EXEC is set but empty", why);
  try {
    resolve_command(exec, {});
  } catch (const InvalidArgument& e) {
    SPMD_THROW(InvalidArgument, "PYTHON_EXEC='", exec, "': ", e.what(), why);
  }
  return exec;
}

// What torchrun runs for `script.py` and `-m module`: the interpreter, with
// unbuffered output (-u) so that the lines reach the console as they are written.
void wrap_python(LaunchOptions& o) {
  if (o.no_python || (!o.module && !ends_with(o.program, ".py"))) return;
  std::vector<std::string> args{"-u"};
  if (o.module) args.push_back("-m");
  args.push_back(o.program);
  args.insert(args.end(), o.args.begin(), o.args.end());
  o.program = python_interpreter();
  o.args = std::move(args);
}

// Registers every flag; the strings are filled in, then converted by finish().
struct RawFlags {
  std::string nnodes = "1", nproc_per_node = "1", redirects = "0", tee = "0", ranks_filter;
  std::string rdzv_backend = "c10d", rdzv_conf;
};

// torchrun's environment default for a flag: PET_ and its name in capitals
// (--nproc-per-node: PET_NPROC_PER_NODE). The command line wins over it.
template <class Opt>
Opt* pet(Opt* opt, const char* name) {
  return opt->envname(std::string("PET_") + name);
}

void add_flags(CLI::App& app, LaunchOptions& o, RawFlags& raw) {
  pet(app.add_option("--nnodes", raw.nnodes, "Number of nodes (machines) in the job"), "NNODES")
      ->capture_default_str();
  pet(app.add_option("--nproc-per-node,--nproc_per_node", raw.nproc_per_node,
                     "Workers per node: a number, cpu, gpu or auto"),
      "NPROC_PER_NODE")
      ->capture_default_str();
  pet(app.add_option("--node-rank,--node_rank", o.node_rank,
                     "This node's index in 0..nnodes-1 (default: 0 for one node; for several, "
                     "the order in which the launchers join)"),
      "NODE_RANK")
      ->check(flags::count(0));
  pet(app.add_option("--master-addr,--master_addr", o.master_addr,
                     "Address of node 0, where the store is hosted"),
      "MASTER_ADDR")
      ->capture_default_str();
  pet(app.add_option("--master-port,--master_port", o.master_port, "Port of the store on node 0"),
      "MASTER_PORT")
      ->capture_default_str()
      ->check(flags::count(1, 65535));
  pet(app.add_option("--rdzv-endpoint,--rdzv_endpoint", o.rdzv_endpoint,
                     "host:port of the store (instead of --master-addr/--master-port); with "
                     "no --node-rank, the launcher that can bind it hosts it"),
      "RDZV_ENDPOINT");
  pet(app.add_option("--rdzv-backend,--rdzv_backend", raw.rdzv_backend,
                     "Accepted for torchrun habits: c10d or static, both the store rendezvous"),
      "RDZV_BACKEND")
      ->check(CLI::IsMember({"c10d", "static"}));
  pet(app.add_option(
          "--rdzv-id,--rdzv_id,--run-id,--run_id", o.run_id,
          "Id of the job, shared by its nodes (default: none; random with --standalone)"),
      "RDZV_ID");
  app.add_option("--rdzv-timeout,--rdzv_timeout", o.rdzv_timeout_s,
                 "Seconds to wait for every node to join (torchrun's join_timeout)")
      ->capture_default_str()
      ->check(flags::seconds());
  pet(app.add_option("--rdzv-conf,--rdzv_conf", raw.rdzv_conf,
                     "torchrun's rendezvous settings, key=value,...: join_timeout (as "
                     "--rdzv-timeout), read_timeout (the store's, default 60 s), and the accepted "
                     "last_call_timeout, close_timeout, keep_alive_*"),
      "RDZV_CONF");
  pet(app.add_flag("--no-python,--no_python", o.no_python,
                   "Execute PROGRAM as it is, even one ending in .py (spmdrun runs any "
                   "program; without this flag a .py file runs as python3 -u PROGRAM)"),
      "NO_PYTHON");
  pet(app.add_flag("-m,--module", o.module,
                   "PROGRAM is a Python module: run python3 -u -m PROGRAM ARGS..."),
      "MODULE");
  pet(app.add_flag("--standalone", o.standalone,
                   "One node, store on a free local port picked without a race"),
      "STANDALONE");
  pet(app.add_option("--max-restarts,--max_restarts", o.max_restarts,
                     "Restarts of the whole worker group after a failure"),
      "MAX_RESTARTS")
      ->capture_default_str()
      ->check(flags::count(0, 1000));
  pet(app.add_option("--monitor-interval,--monitor_interval", o.monitor_interval_s,
                     "Seconds between checks for failures on other nodes"),
      "MONITOR_INTERVAL")
      ->capture_default_str()
      ->check(flags::seconds(3600));
  app.add_option("--stop-grace,--stop_grace", o.stop_grace_s,
                 "Seconds between SIGTERM and SIGKILL when workers are stopped")
      ->capture_default_str()
      ->check(flags::number(0, 3600));
  app.add_option("--hang-timeout,--hang_timeout", o.hang_timeout_s,
                 "Seconds without progress of any rank, while one waits in a collective, "
                 "after which spmdrun prints where each rank stands and stops the job (0: off)")
      ->capture_default_str()
      ->check(flags::number(0, flags::kMaxTimeoutSeconds));
  pet(app.add_option("--role", o.role,
                     "The workers' role, their ROLE_NAME (torchrun's flag: one role per job "
                     "here, so ROLE_RANK and ROLE_WORLD_SIZE are RANK and WORLD_SIZE)"),
      "ROLE")
      ->capture_default_str();
  app.add_flag("--preflight", o.preflight,
               "Before the program, run spmd-preflight on every rank (store, GPUs, an "
               "all_reduce, clocks, versions); a failure names the rank and the check");
  pet(app.add_option("--log-dir,--log_dir", o.log_dir,
                     "Write worker output to LOG_DIR/RUN_ID/attempt_N/rank_R/{stdout,stderr}.log "
                     "(alone, it implies --tee 3)"),
      "LOG_DIR");
  pet(app.add_option("-r,--redirects", raw.redirects,
                     "Streams sent to the log files only: 0 none, 1 stdout, 2 stderr, 3 both, "
                     "or per local rank as 0:1,1:2"),
      "REDIRECTS")
      ->capture_default_str();
  pet(app.add_option("-t,--tee", raw.tee,
                     "Streams written to the log files and the console (same syntax)"),
      "TEE")
      ->capture_default_str();
  pet(app.add_option("--local-ranks-filter,--local_ranks_filter", raw.ranks_filter,
                     "Show only these local ranks on the console, e.g. 0,1 (files keep all)"),
      "LOCAL_RANKS_FILTER");
}

void finish(LaunchOptions& o, const RawFlags& raw, const std::vector<std::string>& rest) {
  o.nnodes = parse_nnodes(raw.nnodes);
  o.nproc_per_node = parse_nproc_per_node(raw.nproc_per_node);
  o.redirects = parse_stream_selection(raw.redirects, "--redirects");
  o.tee = parse_stream_selection(raw.tee, "--tee");
  if (!o.log_dir.empty() && raw.redirects == "0" && raw.tee == "0") o.tee.all = 3;
  if (!raw.ranks_filter.empty()) {
    std::vector<int> ranks;
    for (const std::string& r : split(raw.ranks_filter, ','))
      ranks.push_back(parse_int(r, "--local-ranks-filter"));
    o.local_ranks_filter = ranks;
  }
  if (o.run_id.empty()) o.run_id = o.standalone ? random_id() : "none";
  if (!raw.rdzv_conf.empty()) apply_rdzv_conf(raw.rdzv_conf, o);
  size_t first = !rest.empty() && rest[0] == "--" ? 1 : 0;  // `spmdrun [options] -- PROGRAM`
  if (rest.size() > first) {
    o.program = rest[first];
    o.args.assign(rest.begin() + static_cast<long>(first) + 1, rest.end());
  }
  check_options(o);
  wrap_python(o);
}

}  // namespace

int StreamSelection::for_local_rank(int local_rank) const {
  auto it = per_local_rank.find(local_rank);
  return it == per_local_rank.end() ? all : it->second;
}

StreamSelection parse_stream_selection(const std::string& text, const std::string& flag) {
  StreamSelection sel;
  auto value = [&](const std::string& v) {
    int n = parse_int(v, flag);
    SPMD_CHECK(n <= 3, flag, ": ", n, " is not 0 (none), 1 (stdout), 2 (stderr) or 3 (both)");
    return n;
  };
  if (text.find(':') == std::string::npos) {
    sel.all = value(text);
    return sel;
  }
  for (const std::string& item : split(text, ',')) {
    size_t colon = item.find(':');
    SPMD_CHECK(colon != std::string::npos, flag, ": '", item, "' is not local_rank:streams");
    sel.per_local_rank[parse_int(item.substr(0, colon), flag)] = value(item.substr(colon + 1));
  }
  return sel;
}

int parse_nproc_per_node(const std::string& text) {
  if (text == "cpu") return static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  if (text == "gpu" || text == "auto") {
    int gpus = count_gpus();
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    SPMD_CHECK(gpus > 0 || text == "auto", "--nproc-per-node gpu: no GPU found (",
               visible ? str_cat("CUDA_VISIBLE_DEVICES='", visible, "' names none")
                       : std::string("no /dev/nvidiaN device, and CUDA_VISIBLE_DEVICES is unset"),
               ")");
    return gpus > 0 ? gpus : static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  }
  return parse_int(text, "--nproc-per-node");
}

void apply_rdzv_conf(const std::string& text, LaunchOptions& o) {
  for (const std::string& item : split(text, ',')) {
    if (item.empty()) continue;
    size_t eq = item.find('=');
    SPMD_CHECK(eq != std::string::npos, "--rdzv-conf: '", item, "' is not key=value");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    SPMD_CHECK(!value.empty() && *end == '\0' && v > 0 && v <= flags::kMaxTimeoutSeconds,
               "--rdzv-conf ", key, "=", value, ": not a positive number of seconds");
    if (key == "join_timeout" || key == "timeout") {
      o.rdzv_timeout_s = v;
    } else if (key == "read_timeout") {
      o.store_timeout_s = v;
    } else {
      SPMD_CHECK(key == "last_call_timeout" || key == "close_timeout" ||
                     key == "keep_alive_interval" || key == "keep_alive_max_attempt",
                 "--rdzv-conf: unknown key '", key,
                 "' (known: join_timeout, timeout, read_timeout, last_call_timeout, "
                 "close_timeout, keep_alive_interval, keep_alive_max_attempt)");
    }
  }
}

ParseOutcome parse_options(int argc, char** argv) {
  CLI::App app("spmdrun: start the workers of an SPMD job on this node, as torchrun does.",
               "spmdrun");
  app.footer(
      "Usage: spmdrun [OPTIONS] [--] PROGRAM [ARGS...]\n"
      "PROGRAM and everything after it are the worker's command line, passed on unchanged\n"
      "(a PROGRAM ending in .py runs as python3 -u PROGRAM, unless --no-python;\n"
      "PYTHON_EXEC names another interpreter, as under torchrun).\n"
      "Each flag takes its default from PET_<FLAG> (PET_NNODES, PET_NPROC_PER_NODE...).\n"
      "Each worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
      "GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and TORCHELASTIC_RESTART_COUNT, as under\n"
      "torchrun. Exit code: 0 success, 1 a worker or the rendezvous failed, 2 usage error,\n"
      "128+N after signal N.");
  app.prefix_command();  // PROGRAM and everything after it belong to the worker
  LaunchOptions o;
  RawFlags raw;
  add_flags(app, o, raw);
  ParseOutcome outcome;
  try {
    app.parse(argc, argv);
    finish(o, raw, app.remaining());
  } catch (const CLI::CallForHelp& e) {
    outcome.exit_code = app.exit(e);
    return outcome;
  } catch (const CLI::ParseError& e) {
    std::cerr << "spmdrun: " << e.what() << " (see spmdrun --help)\n";
    outcome.exit_code = 2;
    return outcome;
  } catch (const InvalidArgument& e) {
    std::cerr << "spmdrun: " << e.what() << "\n";
    outcome.exit_code = 2;
    return outcome;
  }
  outcome.options = std::move(o);
  return outcome;
}

}  // namespace spmd::launcher
