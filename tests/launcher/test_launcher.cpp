// spmdrun on one node, run as a real process over spmd_test_worker: the
// workers' environment, the failure report (exit code, signal, SIGKILL),
// restarts, signals to the launcher, output routing and log files, and the
// errors a user meets first. Every run has its own deadline.
#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "launch_helpers.h"
#include "runtime/socket.h"

using namespace spmd::test;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> worker(std::vector<std::string> prefix, std::vector<std::string> flags) {
  prefix.push_back(worker_path());
  prefix.insert(prefix.end(), flags.begin(), flags.end());
  return prefix;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("spmdrun: each worker gets the torchrun variables", "[launcher]") {
  RunResult r = run_spmdrun(worker({"--standalone", "--nproc-per-node", "3", "--max-restarts", "2",
                                    "--run-id", "envtest"},
                                   {"--print-env", "--store", "--bind-master"}),
                            30s, {}, {"OMP_NUM_THREADS"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  for (int rank = 0; rank < 3; ++rank) {
    std::string p = "[rank" + std::to_string(rank) + "]: ENV ";
    CHECK(count(r.out, p + "RANK=" + std::to_string(rank) + "\n") == 1);
    CHECK(count(r.out, p + "LOCAL_RANK=" + std::to_string(rank) + "\n") == 1);
    CHECK(count(r.out, p + "WORLD_SIZE=3\n") == 1);
    CHECK(count(r.out, p + "LOCAL_WORLD_SIZE=3\n") == 1);
    CHECK(count(r.out, p + "GROUP_RANK=0\n") == 1);
    CHECK(count(r.out, p + "GROUP_WORLD_SIZE=1\n") == 1);
    CHECK(count(r.out, p + "MASTER_ADDR=127.0.0.1\n") == 1);
    CHECK(count(r.out, p + "TORCHELASTIC_RESTART_COUNT=0\n") == 1);
    CHECK(count(r.out, p + "TORCHELASTIC_MAX_RESTARTS=2\n") == 1);
    CHECK(count(r.out, p + "TORCHELASTIC_RUN_ID=envtest\n") == 1);
    CHECK(count(r.out, p + "OMP_NUM_THREADS=1\n") == 1);
    // The ranks found each other through the launcher's store.
    CHECK(count(r.out, "[rank" + std::to_string(rank) + "]: STORE OK ranks=3 attempt=0\n") == 1);
  }
  // spmd workers meet at the launcher's store; MASTER_PORT is another port,
  // one for the whole job, that rank 0 could bind (PyTorch's rank 0 does).
  const std::string store = line_after(r.out, "[rank0]: ENV SPMD_AGENT_STORE=");
  const std::string master_port = line_after(r.out, "[rank0]: ENV MASTER_PORT=");
  CHECK(store.rfind("127.0.0.1:", 0) == 0);
  CHECK(count(r.out, "ENV SPMD_AGENT_STORE=" + store + "\n") == 3);
  CHECK(count(r.out, "ENV MASTER_PORT=" + master_port + "\n") == 3);
  CHECK(std::stoi(master_port) > 0);
  CHECK(store != "127.0.0.1:" + master_port);
  CHECK(count(r.out, "[rank0]: BOUND MASTER_PORT=" + master_port + "\n") == 1);
  CHECK(count(r.err, "OMP_NUM_THREADS=1") == 1);  // the note, once
  // A value the user set is kept, and no note is printed.
  RunResult kept = run_spmdrun(worker({"--standalone", "--nproc-per-node", "2"}, {"--print-env"}),
                               30s, {"OMP_NUM_THREADS=3"});
  CHECK(count(kept.out, "ENV OMP_NUM_THREADS=3\n") == 2);
  CHECK(kept.err.find("OMP_NUM_THREADS") == std::string::npos);
}

TEST_CASE("spmdrun: failure report for an exit code", "[launcher]") {
  RunResult r = run_spmdrun(
      worker({"--standalone", "--nproc-per-node", "3", "--stop-grace", "5"},
             {"--fail-rank", "1", "--exit-code", "3", "--stdout-lines", "15", "--sleep", "60"}),
      30s);
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.seconds < 15);  // the others were stopped, not waited for
  CHECK(r.err.find("first to fail : rank 1 (local rank 1 on node 0, pid ") != std::string::npos);
  CHECK(r.err.find("how           : exited with code 3") != std::string::npos);
  CHECK(r.err.find("s after the workers started") != std::string::npos);
  CHECK(r.err.find("rank 0 was killed by signal 15 (SIGTERM)") != std::string::npos);
  CHECK(r.err.find("rank 2 was killed by signal 15 (SIGTERM)") != std::string::npos);
  // The tail: the last 10 lines of rank 1, and only of rank 1.
  CHECK(r.err.find("| out line 14 from rank 1") != std::string::npos);
  CHECK(r.err.find("| out line 5 from rank 1") != std::string::npos);
  CHECK(r.err.find("| out line 4 from rank 1") == std::string::npos);
  CHECK(r.err.find("from rank 0") == std::string::npos);
}

TEST_CASE("spmdrun: failure report for a signal, by name", "[launcher]") {
  RunResult r = run_spmdrun(worker({"--standalone", "--nproc-per-node", "2"},
                                   {"--signal-rank", "1", "--signal", "SEGV", "--sleep", "60"}),
                            30s);
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("first to fail : rank 1") != std::string::npos);
  CHECK(r.err.find("was killed by signal 11 (SIGSEGV)") != std::string::npos);
}

TEST_CASE("spmdrun: failure report for an OOM-style SIGKILL", "[launcher]") {
  RunResult r = run_spmdrun(worker({"--standalone", "--nproc-per-node", "2"},
                                   {"--signal-rank", "0", "--signal", "KILL", "--sleep", "60"}),
                            30s);
  INFO(r.err);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("first to fail : rank 0") != std::string::npos);
  CHECK(r.err.find("was killed by signal 9 (SIGKILL)") != std::string::npos);
  CHECK(r.err.find("out-of-memory killer") != std::string::npos);
}

TEST_CASE("spmdrun: a restart, then success", "[launcher]") {
  RunResult r = run_spmdrun(worker({"--standalone", "--nproc-per-node", "2", "--max-restarts", "3"},
                                   {"--fail-until-restart", "1", "--print-env"}),
                            30s);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(count(r.err, "worker failure") == 1);
  CHECK(count(r.err, "restarting the workers (restart 1 of 3)") == 1);
  // Rank 0 failed at restart 0 (rank 1 may have been stopped before it printed);
  // at restart 1 both ranks ran to the end.
  CHECK(count(r.out, "[rank0]: ENV TORCHELASTIC_RESTART_COUNT=0\n") == 1);
  CHECK(count(r.out, "ENV TORCHELASTIC_RESTART_COUNT=1\n") == 2);
  CHECK(count(r.out, "ENV TORCHELASTIC_RESTART_COUNT=2\n") == 0);

  RunResult exhausted =
      run_spmdrun(worker({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1"},
                         {"--fail-until-restart", "5"}),
                  30s);
  CHECK(exhausted.exit_code == 1);
  CHECK(count(exhausted.err, "worker failure") == 2);
  CHECK(exhausted.err.find("restart 1 of at most 1") != std::string::npos);
}

TEST_CASE("spmdrun: SIGTERM and SIGINT are forwarded, nothing is left behind", "[launcher]") {
  auto [sig, name] = GENERATE(std::make_pair(SIGTERM, std::string("SIGTERM")),
                              std::make_pair(SIGINT, std::string("SIGINT")));
  std::string tag = unique_tag();
  LauncherProcess p(worker({"--standalone", "--nproc-per-node", "2"},
                           {"--tag", tag, "--report-signals", "--print-pid", "--sleep", "60"}));
  REQUIRE(p.wait_for_output("PID ", 10s, 2));
  REQUIRE(processes_with_tag(tag).size() == 4);  // the launcher, its guardian, two workers
  p.send_signal(sig);
  REQUIRE(p.wait_exit(10s));
  INFO(p.all());
  CHECK(p.exit_code() == 128 + sig);
  CHECK(count(p.out(), "GOT " + name) == 2);  // each worker saw the signal itself
  CHECK(wait_until_gone(tag, 5s));
}

TEST_CASE("spmdrun: a worker that ignores SIGTERM is killed after the grace", "[launcher]") {
  std::string tag = unique_tag();
  LauncherProcess p(worker({"--standalone", "--nproc-per-node", "2", "--stop-grace", "1"},
                           {"--tag", tag, "--ignore-sigterm", "--print-pid", "--sleep", "60"}));
  REQUIRE(p.wait_for_output("PID ", 10s, 2));
  auto t0 = std::chrono::steady_clock::now();
  p.send_signal(SIGTERM);
  REQUIRE(p.wait_exit(10s));
  CHECK(std::chrono::steady_clock::now() - t0 >= 900ms);
  CHECK(p.exit_code() == 128 + SIGTERM);
  CHECK(wait_until_gone(tag, 5s));
}

TEST_CASE("spmdrun: SIGKILL to the launcher leaves no worker behind", "[launcher]") {
  std::string tag = unique_tag();
  LauncherProcess p(worker({"--standalone", "--nproc-per-node", "3"},
                           {"--tag", tag, "--ignore-sigterm", "--print-pid", "--sleep", "60"}));
  REQUIRE(p.wait_for_output("PID ", 10s, 3));
  REQUIRE(processes_with_tag(tag).size() == 5);  // the launcher, its guardian, three workers
  p.send_signal(SIGKILL);
  REQUIRE(p.wait_exit(5s));
  CHECK(wait_until_gone(tag, 5s));  // the parent-death signal took the workers
  INFO(p.all());
  CHECK(p.err().find("its guardian killed (SIGKILL) 3 worker process group(s)") !=
        std::string::npos);
}

TEST_CASE("spmdrun: --log-dir, --tee and --redirects", "[launcher]") {
  std::string dir = "/tmp/spmdrun_test_logs_" + unique_tag();
  fs::remove_all(dir);
  std::vector<std::string> flags{"--stdout-lines", "3", "--stderr-lines", "2"};
  // --log-dir alone: every stream in the files and on the console.
  RunResult r = run_spmdrun(
      worker({"--standalone", "--nproc-per-node", "2", "--log-dir", dir, "--run-id", "job1"},
             flags),
      30s);
  REQUIRE(r.exit_code == 0);
  for (int rank = 0; rank < 2; ++rank) {
    std::string base = dir + "/job1/attempt_0/rank_" + std::to_string(rank) + "/";
    std::string id = " from rank " + std::to_string(rank) + "\n";
    CHECK(read_file(base + "stdout.log") ==
          "out line 0" + id + "out line 1" + id + "out line 2" + id);
    CHECK(read_file(base + "stderr.log") == "err line 0" + id + "err line 1" + id);
    CHECK(count(r.out, "[rank" + std::to_string(rank) + "]: out line") == 3);
    CHECK(count(r.err, "[rank" + std::to_string(rank) + "]: err line") == 2);
  }
  // stdout redirected (file only), stderr tee'd (file and console).
  RunResult q = run_spmdrun(worker({"--standalone", "--nproc-per-node", "2", "--log-dir", dir,
                                    "--run-id", "job2", "--redirects", "1", "--tee", "2"},
                                   flags),
                            30s);
  REQUIRE(q.exit_code == 0);
  CHECK(count(q.out, "out line") == 0);
  CHECK(count(q.err, "err line") == 4);
  CHECK(count(read_file(dir + "/job2/attempt_0/rank_1/stdout.log"), "out line") == 3);
  CHECK(count(read_file(dir + "/job2/attempt_0/rank_1/stderr.log"), "err line") == 2);
  fs::remove_all(dir);
}

TEST_CASE("spmdrun: --local-ranks-filter shows only the chosen ranks", "[launcher]") {
  RunResult r =
      run_spmdrun(worker({"--standalone", "--nproc-per-node", "3", "--local-ranks-filter", "1"},
                         {"--stdout-lines", "2"}),
                  30s);
  CHECK(r.exit_code == 0);
  CHECK(count(r.out, "[rank1]: out line") == 2);
  CHECK(count(r.out, "[rank0]") + count(r.out, "[rank2]") == 0);
}

TEST_CASE("spmdrun: clear errors for a taken port, no master, no program, bad flags",
          "[launcher]") {
  spmd::net::Socket taken = spmd::net::listen_tcp("", 0);
  std::string port = std::to_string(spmd::net::local_port(taken.fd()));
  RunResult busy = run_spmdrun(worker({"--master-port", port}, {}), 10s);
  CHECK(busy.exit_code == 1);
  CHECK(busy.err.find("port " + port + " is already in use") != std::string::npos);

  RunResult unreachable = run_spmdrun(worker({"--nnodes", "2", "--node-rank", "1", "--master-port",
                                              std::to_string(free_port()), "--rdzv-timeout", "1"},
                                             {}),
                                      10s);
  CHECK(unreachable.exit_code == 1);
  CHECK(unreachable.err.find("cannot reach the store at 127.0.0.1:") != std::string::npos);
  CHECK(unreachable.seconds < 6);

  RunResult missing = run_spmdrun({"--standalone", "./no/such/program"}, 10s);
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("program './no/such/program' not found") != std::string::npos);
  RunResult missing_path = run_spmdrun({"--standalone", "no-such-program-xyz"}, 10s);
  CHECK(missing_path.err.find("'no-such-program-xyz' not found in PATH") != std::string::npos);

  for (auto [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--nproc-per-node", "abc", "true"}, "'abc' is not a non-negative integer"},
           {{"--nnodes", "1:4", "true"}, "elastic ranges are not supported"},
           {{"--redirects", "7", "true"}, "7 is not 0 (none)"},
           {{"--no-such-flag", "true"}, "unknown option '--no-such-flag'"},
           {{"--standalone"}, "no program to run"},
           {{"--node-rank", "2", "--nnodes", "2", "true"}, "--node-rank 2 is not below"}}) {
    RunResult bad = run_spmdrun(args, 10s);
    INFO(bad.err);
    CHECK(bad.exit_code == 2);
    CHECK(bad.err.find(message) != std::string::npos);
  }
  RunResult help = run_spmdrun({"--help"}, 10s);
  CHECK(help.exit_code == 0);
  for (const char* flag :
       {"--nnodes", "--nproc-per-node", "--node-rank", "--master-addr", "--master-port",
        "--rdzv-endpoint", "--rdzv-id", "--standalone", "--max-restarts", "--monitor-interval",
        "--log-dir", "--redirects", "--tee", "--local-ranks-filter", "--run-id"})
    CHECK(help.out.find(flag) != std::string::npos);
}

// SPMD_SOCKET_IFNAME picks the store's interface (docs/launcher.md, "Which
// interface"): the workers reach the store from it, a name no interface has
// stops spmdrun at once, node 0 refuses to host the store off the address
// the other nodes are given, and a store unreachable from it is named with
// both addresses and the variable. Loopback holds all of 127/8, so
// 127.0.0.2 stands for an address of another interface.
TEST_CASE("spmdrun: SPMD_SOCKET_IFNAME picks the store's interface", "[launcher]") {
  RunResult lo = run_spmdrun(worker({"--standalone", "--nproc-per-node", "2"}, {"--store"}), 30s,
                             {"SPMD_SOCKET_IFNAME=lo"});
  INFO(lo.out << lo.err);
  CHECK(lo.exit_code == 0);
  CHECK(count(lo.out, "STORE OK ranks=2 attempt=0\n") == 2);

  RunResult nosuch = run_spmdrun(worker({"--standalone", "--nproc-per-node", "2"}, {"--store"}),
                                 10s, {"SPMD_SOCKET_IFNAME=nosuch0"});
  CHECK(nosuch.exit_code == 2);
  CHECK(nosuch.err.find("SPMD_SOCKET_IFNAME=nosuch0: no interface of that name has an IPv4 "
                        "address; those that have one: ") != std::string::npos);
  CHECK(nosuch.err.find("lo (127.0.0.1)") != std::string::npos);
  CHECK(nosuch.seconds < 5);

  const std::string port = std::to_string(free_port());
  RunResult off = run_spmdrun(worker({"--nnodes", "2", "--node-rank", "0", "--master-addr",
                                      "127.0.0.2", "--master-port", port},
                                     {}),
                              10s, {"SPMD_SOCKET_IFNAME=lo"});
  CHECK(off.exit_code == 2);
  CHECK(off.err.find("cannot host the store: SPMD_SOCKET_IFNAME=lo (127.0.0.1) puts it on "
                     "127.0.0.1, but the other nodes look for it at 127.0.0.2") !=
        std::string::npos);

  RunResult far = run_spmdrun(worker({"--nnodes", "2", "--node-rank", "1", "--master-addr",
                                      "127.0.0.2", "--master-port", port, "--rdzv-timeout", "1"},
                                     {}),
                              10s, {"SPMD_SOCKET_IFNAME=lo"});
  CHECK(far.exit_code == 1);
  CHECK(far.err.find("cannot reach the store at 127.0.0.2:" + port + " within 1 s") !=
        std::string::npos);
  CHECK(far.err.find("connect to 127.0.0.2:" + port + " from 127.0.0.1") != std::string::npos);
  CHECK(far.err.find("this launcher connects from SPMD_SOCKET_IFNAME=lo (127.0.0.1): can that "
                     "address reach 127.0.0.2?") != std::string::npos);
  CHECK(far.seconds < 6);
}
