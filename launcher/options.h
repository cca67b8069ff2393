// spmdrun's command line: torchrun's flags (with their underscore spellings
// too, so habits carry over), parsed by CLI11 into LaunchOptions and checked
// for consistency. `spmdrun [options] [--] PROGRAM [ARGS...]`: everything from
// PROGRAM on is the worker's own command line. As under torchrun, a PROGRAM
// ending in .py runs as `python3 -u PROGRAM` (unless --no-python), `-m MODULE`
// as `python3 -u -m MODULE`, the interpreter being $PYTHON_EXEC when it is
// set, and each flag takes its default from PET_<FLAG> (PET_NPROC_PER_NODE,
// PET_NNODES...) when the command line does not give it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace spmd::launcher {

// Which standard streams a flag like --tee applies to, per local rank:
// torchrun's "3" (both, every rank) or "0:1,1:2" (stdout of local rank 0,
// stderr of local rank 1). Bit 1 is stdout, bit 2 is stderr.
struct StreamSelection {
  int all = 0;
  std::map<int, int> per_local_rank;

  int for_local_rank(int local_rank) const;
  bool includes(int local_rank, int stream_bit) const {
    return (for_local_rank(local_rank) & stream_bit) != 0;
  }
};
constexpr int kStdoutBit = 1;
constexpr int kStderrBit = 2;

struct LaunchOptions {
  int nnodes = 1;
  int nproc_per_node = 1;
  int node_rank = -1;  // -1: 0 for one node; assigned at rendezvous for several
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string rdzv_endpoint;    // "host:port"; overrides master_addr/port
  std::string run_id;           // --rdzv-id / --run-id
  double rdzv_timeout_s = 600;  // --rdzv-timeout, or --rdzv-conf join_timeout=
  double store_timeout_s = 60;  // --rdzv-conf read_timeout= (torchrun's default, 60 s)
  bool standalone = false;
  int max_restarts = 0;
  double monitor_interval_s = 0.1;
  double stop_grace_s = 30;
  double hang_timeout_s = 0;     // --hang-timeout: 0 = off (launcher/hang_triage.h)
  bool preflight = false;        // --preflight: spmd-preflight on every rank first
  std::string role = "default";  // --role: the workers' ROLE_NAME
  std::string log_dir;
  StreamSelection redirects;
  StreamSelection tee;
  std::optional<std::vector<int>> local_ranks_filter;  // console shows only these
  bool no_python = false;  // --no-python: a .py PROGRAM is executed as it is
  bool module = false;     // -m: PROGRAM is a Python module
  std::string program;     // what is executed: "python3" for a .py file or -m
  std::vector<std::string> args;
};

// What parse_options decided: run, or exit at once with a code (after --help
// printed the help, or a bad flag printed its error).
struct ParseOutcome {
  std::optional<LaunchOptions> options;
  int exit_code = 0;
};

// Parses argv; prints help or errors itself and says so in the outcome.
ParseOutcome parse_options(int argc, char** argv);

// Parses torchrun's stream syntax ("3", "0:1,1:2"). Throws InvalidArgument
// naming `flag` when the text is neither.
StreamSelection parse_stream_selection(const std::string& text, const std::string& flag);

// --nproc-per-node: a number, or "cpu" (the cores), "gpu" (the GPUs: the
// entries of CUDA_VISIBLE_DEVICES when it is set, else the /dev/nvidiaN
// devices), "auto" (the GPUs if any, else the cores).
int parse_nproc_per_node(const std::string& text);

// --rdzv-conf "key=value,...": torchrun's rendezvous settings. join_timeout
// (and its older name timeout) sets the rendezvous timeout, read_timeout the
// store's; last_call_timeout, close_timeout, keep_alive_interval and
// keep_alive_max_attempt are accepted and have no effect (membership is
// fixed, see docs/launcher.md). Throws InvalidArgument for any other key or a
// value that is not a positive number.
void apply_rdzv_conf(const std::string& text, LaunchOptions& options);

}  // namespace spmd::launcher
