// Several spmdrun processes forming one job on localhost: static node ranks
// and a shared --rdzv-endpoint, a node that never joins, a failure on one
// node stopping the other, and a restart coordinated across nodes. (The
// same over two network namespaces is test_launcher_netns.sh.)
#include <signal.h>

#include <catch2/catch.hpp>
#include <thread>

#include "launch_helpers.h"

using namespace spmd::test;

namespace {

std::vector<std::string> node_args(int nnodes, int node_rank, const std::string& endpoint_flag,
                                   const std::string& endpoint, std::vector<std::string> extra,
                                   std::vector<std::string> worker_flags) {
  std::vector<std::string> a{
      "--nnodes", std::to_string(nnodes), endpoint_flag, endpoint,   "--nproc-per-node",
      "2",        "--rdzv-timeout",       "20",          "--run-id", "multinode"};
  if (node_rank >= 0) a.insert(a.end(), {"--node-rank", std::to_string(node_rank)});
  a.insert(a.end(), extra.begin(), extra.end());
  a.push_back(worker_path());
  a.insert(a.end(), worker_flags.begin(), worker_flags.end());
  return a;
}

// Both launchers' output must show ranks 0..3 of a world of 4, with the
// ranks' store rendezvous through node 0's launcher, and one MASTER_PORT for
// the whole job that node 0's rank 0 could bind.
void check_one_job(LauncherProcess& a, LauncherProcess& b) {
  std::string all = a.out() + b.out();
  const std::string master_port = line_after(all, "[rank0]: ENV MASTER_PORT=");
  const std::string store = line_after(all, "[rank0]: ENV SPMD_AGENT_STORE=");
  CHECK(count(all, "ENV MASTER_ADDR=127.0.0.1\n") == 4);
  CHECK(count(all, "ENV MASTER_PORT=" + master_port + "\n") == 4);
  CHECK(count(all, "ENV SPMD_AGENT_STORE=" + store + "\n") == 4);
  CHECK(store != "127.0.0.1:" + master_port);
  CHECK(count(all, "[rank0]: BOUND MASTER_PORT=" + master_port + "\n") == 1);
  for (int rank = 0; rank < 4; ++rank) {
    std::string p = "[rank" + std::to_string(rank) + "]: ";
    CHECK(count(all, p + "ENV RANK=" + std::to_string(rank) + "\n") == 1);
    CHECK(count(all, p + "ENV WORLD_SIZE=4\n") == 1);
    CHECK(count(all, p + "ENV GROUP_RANK=" + std::to_string(rank / 2) + "\n") == 1);
    CHECK(count(all, p + "ENV GROUP_WORLD_SIZE=2\n") == 1);
    CHECK(count(all, p + "ENV LOCAL_RANK=" + std::to_string(rank % 2) + "\n") == 1);
    CHECK(count(all, p + "STORE OK ranks=4 attempt=0\n") == 1);
  }
}

}  // namespace

TEST_CASE("spmdrun: two launchers on localhost with --node-rank form one job", "[launcher]") {
  std::string port = std::to_string(free_port());
  LauncherProcess node0(
      node_args(2, 0, "--master-port", port, {}, {"--print-env", "--store", "--bind-master"}));
  LauncherProcess node1(
      node_args(2, 1, "--master-port", port, {}, {"--print-env", "--store", "--bind-master"}));
  REQUIRE(node0.wait_exit(30s));
  REQUIRE(node1.wait_exit(30s));
  INFO(node0.all() << node1.all());
  CHECK(node0.exit_code() == 0);
  CHECK(node1.exit_code() == 0);
  // Node 1 started second yet its local ranks are 2 and 3: its --node-rank says so.
  CHECK(count(node1.out(), "[rank2]: ENV RANK=2") == 1);
  check_one_job(node0, node1);
}

TEST_CASE("spmdrun: two launchers sharing --rdzv-endpoint, no node rank", "[launcher]") {
  std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  LauncherProcess a(node_args(2, -1, "--rdzv-endpoint", endpoint, {},
                              {"--print-env", "--store", "--bind-master"}));
  LauncherProcess b(node_args(2, -1, "--rdzv-endpoint", endpoint, {},
                              {"--print-env", "--store", "--bind-master"}));
  REQUIRE(a.wait_exit(30s));
  REQUIRE(b.wait_exit(30s));
  INFO(a.all() << b.all());
  CHECK(a.exit_code() == 0);
  CHECK(b.exit_code() == 0);
  check_one_job(a, b);
}

TEST_CASE("spmdrun: a node that never joins ends the rendezvous with a timeout", "[launcher]") {
  std::string port = std::to_string(free_port());
  auto args = node_args(2, 0, "--master-port", port, {}, {});
  args[7] = "1.5";  // --rdzv-timeout
  RunResult r = run_spmdrun(args, 15s);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("only 1 of 2 nodes joined within 1.5 s; missing node rank(s) 1") !=
        std::string::npos);
  CHECK(r.seconds < 6);
}

TEST_CASE("spmdrun: a failure on one node stops the other", "[launcher]") {
  std::string port = std::to_string(free_port());
  std::vector<std::string> flags{"--fail-rank", "3", "--exit-code", "9", "--sleep", "60"};
  LauncherProcess node0(node_args(2, 0, "--master-port", port, {}, flags));
  LauncherProcess node1(node_args(2, 1, "--master-port", port, {}, flags));
  REQUIRE(node1.wait_exit(20s));
  REQUIRE(node0.wait_exit(20s));
  INFO(node0.all() << node1.all());
  CHECK(node1.exit_code() == 1);
  CHECK(node1.err().find("first to fail : rank 3 (local rank 1 on node 1") != std::string::npos);
  CHECK(node0.exit_code() == 1);
  CHECK(node0.err().find(
            "another node failed (rank 3 (local rank 1 on node 1) exited with code 9)") !=
        std::string::npos);
}

TEST_CASE("spmdrun: a restart is coordinated across nodes", "[launcher]") {
  std::string port = std::to_string(free_port());
  std::vector<std::string> flags{"--fail-until-restart", "1", "--store", "--print-env"};
  LauncherProcess node0(node_args(2, 0, "--master-port", port, {"--max-restarts", "1"}, flags));
  LauncherProcess node1(node_args(2, 1, "--master-port", port, {"--max-restarts", "1"}, flags));
  REQUIRE(node0.wait_exit(30s));
  REQUIRE(node1.wait_exit(30s));
  INFO(node0.all() << node1.all());
  CHECK(node0.exit_code() == 0);
  CHECK(node1.exit_code() == 0);
  // Rank 0 (node 0) failed at restart 0; both nodes restarted; at restart 1
  // all four ranks met in the store again, under keys of their own attempt
  // (a counter shared with attempt 0 would have read more than 4).
  CHECK(count(node0.err(), "restarting the workers (restart 1 of 1)") == 1);
  CHECK(count(node1.err(), "restarting the workers (restart 1 of 1)") == 1);
  std::string all = node0.out() + node1.out();
  CHECK(count(all, "ENV TORCHELASTIC_RESTART_COUNT=1\n") == 4);
  CHECK(count(all, "STORE OK ranks=4 attempt=1\n") == 4);
  CHECK(count(all, "STORE OK ranks=8") == 0);
}

TEST_CASE("spmdrun: a signal cuts a rendezvous wait short", "[launcher]") {
  std::string port = std::to_string(free_port());
  auto args = node_args(2, 0, "--master-port", port, {}, {});
  args[7] = "60";  // --rdzv-timeout: far longer than the test may take
  LauncherProcess node0(args);
  std::this_thread::sleep_for(300ms);  // now waiting for node 1
  node0.send_signal(SIGINT);
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(node0.wait_exit(5s));
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  CHECK(node0.exit_code() == 128 + SIGINT);
  CHECK(node0.err().find("interrupted by SIGINT") != std::string::npos);
}
