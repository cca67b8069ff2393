// Reading the launcher's variables: torchrun's, Slurm's and Open MPI's, each
// from a made-up environment, and the errors for missing or malformed ones.
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "runtime/env.h"
#include "runtime/error.h"

using namespace spmd;

namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace

TEST_CASE("env: torchrun's variables", "[env]") {
  LaunchEnv e = parse_launch_env(env_of({{"RANK", "5"},
                                         {"WORLD_SIZE", "8"},
                                         {"LOCAL_RANK", "1"},
                                         {"LOCAL_WORLD_SIZE", "4"},
                                         {"GROUP_RANK", "1"},
                                         {"GROUP_WORLD_SIZE", "2"},
                                         {"MASTER_ADDR", "node0"},
                                         {"MASTER_PORT", "29500"},
                                         {"TORCHELASTIC_RESTART_COUNT", "2"},
                                         {"TORCHELASTIC_MAX_RESTARTS", "3"},
                                         {"TORCHELASTIC_RUN_ID", "job42"},
                                         {"SPMD_AGENT_STORE", "node0:29400"}}));
  CHECK(e.launcher == "torchrun");
  CHECK(e.rank == 5);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 4);
  CHECK(e.group_rank == 1);
  CHECK(e.group_world_size == 2);
  CHECK(e.master_addr == "node0");
  CHECK(e.master_port == 29500);
  CHECK(e.restart_count == 2);
  CHECK(e.max_restarts == 3);
  CHECK(e.run_id == "job42");
  CHECK(e.agent_store_host == "node0");
  CHECK(e.agent_store_port == 29400);
}

TEST_CASE("env: without local variables the job is one node", "[env]") {
  LaunchEnv e = parse_launch_env(env_of({{"RANK", "2"}, {"WORLD_SIZE", "3"}}));
  CHECK(e.local_rank == 2);
  CHECK(e.local_world_size == 3);
  CHECK(e.master_addr.empty());
  CHECK(e.master_port == 0);
  CHECK(e.agent_store_host.empty());
}

TEST_CASE("env: missing and malformed values name the variable", "[env]") {
  CHECK_THROWS_WITH(parse_launch_env(env_of({{"RANK", "0"}})),
                    Catch::Contains("WORLD_SIZE is not set"));
  CHECK_THROWS_WITH(parse_launch_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "four"}})),
                    Catch::Contains("WORLD_SIZE='four' is not an integer"));
  CHECK_THROWS_WITH(parse_launch_env(env_of({{"RANK", "-1"}, {"WORLD_SIZE", "4"}})),
                    Catch::Contains("RANK=-1 is out of range"));
  CHECK_THROWS_WITH(parse_launch_env(env_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}})),
                    Catch::Contains("rank 4 is not below the world size 4"));
  CHECK_THROWS_WITH(
      parse_launch_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}})),
      Catch::Contains("MASTER_PORT=70000"));
  CHECK_THROWS_WITH(
      parse_launch_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", ""}})),
      Catch::Contains("MASTER_PORT='' is not an integer"));
  CHECK_THROWS_WITH(
      parse_launch_env(env_of(
          {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}})),
      Catch::Contains("local rank 2 is not below the local world size 2"));
  CHECK_THROWS_WITH(parse_launch_env(env_of({})), Catch::Contains("no launcher variables"));
  // spmdrun sets SPMD_AGENT_STORE to its store's host:port.
  CHECK_THROWS_WITH(
      parse_launch_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"SPMD_AGENT_STORE", "1"}})),
      Catch::Contains("SPMD_AGENT_STORE (spmdrun's store): no port in '1' (expected host:port)"));
}

TEST_CASE("env: Slurm's variables, master from the node list", "[env]") {
  LaunchEnv e = parse_launch_env(env_of({{"SLURM_PROCID", "6"},
                                         {"SLURM_NTASKS", "7"},
                                         {"SLURM_LOCALID", "2"},
                                         {"SLURM_NODEID", "1"},
                                         {"SLURM_NNODES", "2"},
                                         {"SLURM_TASKS_PER_NODE", "4,3"},
                                         {"SLURM_JOB_ID", "123456"},
                                         {"SLURM_STEP_ID", "0"},
                                         {"SLURM_JOB_NODELIST", "gpu[07-08]"}}));
  CHECK(e.launcher == "slurm");
  CHECK(e.rank == 6);
  CHECK(e.world_size == 7);
  CHECK(e.local_rank == 2);
  CHECK(e.local_world_size == 3);  // the second node runs 3 tasks
  CHECK(e.group_rank == 1);
  CHECK(e.group_world_size == 2);
  CHECK(e.master_addr == "gpu07");
  CHECK(e.master_port == 20000 + 123456 % 12000);
  CHECK(e.run_id == "123456");
  // MASTER_ADDR and MASTER_PORT win when set.
  LaunchEnv f = parse_launch_env(env_of({{"SLURM_PROCID", "0"},
                                         {"SLURM_NTASKS", "2"},
                                         {"SLURM_LOCALID", "0"},
                                         {"SLURM_STEPID", "3"},
                                         {"SLURM_JOB_NODELIST", "a1,b2"},
                                         {"MASTER_ADDR", "10.0.0.9"},
                                         {"MASTER_PORT", "4000"}}));
  CHECK(f.master_addr == "10.0.0.9");
  CHECK(f.master_port == 4000);
  CHECK(f.local_world_size == 2);
}

namespace {

// vars[name] = value, by a move (GCC 12 warns falsely about assigning a literal).
void set(std::map<std::string, std::string>& vars, const std::string& name, std::string value) {
  vars.insert_or_assign(name, std::move(value));
}

// One step of a job: two tasks, one node.
std::map<std::string, std::string> slurm_step_vars(const std::string& job,
                                                   const std::string& step) {
  return {{"SLURM_PROCID", "1"},        {"SLURM_NTASKS", "2"},   {"SLURM_LOCALID", "1"},
          {"SLURM_JOB_ID", job},        {"SLURM_STEP_ID", step}, {"SLURM_JOB_NODELIST", "n[01-04]"},
          {"SLURM_TASKS_PER_NODE", "2"}};
}

}  // namespace

TEST_CASE("env: two Slurm steps of one job at once get different store ports", "[env]") {
  // srun --overlap twice in one allocation: steps 0 and 1 of job 123456.
  LaunchEnv s0 = parse_launch_env(env_of(slurm_step_vars("123456", "0")));
  LaunchEnv s1 = parse_launch_env(env_of(slurm_step_vars("123456", "1")));
  CHECK(s0.master_port == 20000 + 123456 % 12000);           // 23456, worked by hand
  CHECK(s1.master_port == 20000 + (123456 + 7919) % 12000);  // 31375
  CHECK(s1.master_port == 31375);
  CHECK(s0.master_port != s1.master_port);
  // Every task of one step agrees (the port depends on the job and step only).
  auto other_task = slurm_step_vars("123456", "1");
  set(other_task, "SLURM_PROCID", "0");
  set(other_task, "SLURM_LOCALID", "0");
  CHECK(parse_launch_env(env_of(other_task)).master_port == s1.master_port);
  // Many steps of one job: all distinct, all in 20000..31999, below the
  // ephemeral ports.
  std::set<int> ports;
  for (int step = 0; step < 500; ++step) {
    int port = slurm_store_port(987654, static_cast<uint64_t>(step));
    CHECK((port >= 20000 && port < 32000));
    ports.insert(port);
  }
  CHECK(ports.size() == 500);
  auto bad = slurm_step_vars("1", "next");
  CHECK_THROWS_WITH(parse_launch_env(env_of(bad)),
                    Catch::Contains("SLURM_STEP_ID='next' is not a job step id"));
}

TEST_CASE("env: a Slurm step's master is the first host of SLURM_STEP_NODELIST", "[env]") {
  auto vars = slurm_step_vars("42", "2");
  CHECK(parse_launch_env(env_of(vars)).master_addr == "n01");  // no step list: the job's
  set(vars, "SLURM_STEP_NODELIST", "n[03-04]");  // the step runs on the last two nodes
  CHECK(parse_launch_env(env_of(vars)).master_addr == "n03");
  set(vars, "SLURM_STEP_NODELIST", "n[03");
  CHECK_THROWS_WITH(parse_launch_env(env_of(vars)),
                    Catch::Contains("SLURM_STEP_NODELIST='n[03': missing ']'"));
}

TEST_CASE("env: an sbatch script outside srun fails at once, saying why", "[env]") {
  // `sbatch -n2` runs the script once, as task 0 of 2, in no job step.
  auto vars = slurm_step_vars("77", "0");
  vars.erase("SLURM_STEP_ID");
  set(vars, "SLURM_PROCID", "0");
  set(vars, "SLURM_LOCALID", "0");
  CHECK_THROWS_AS(parse_launch_env(env_of(vars)), InvalidArgument);
  CHECK_THROWS_WITH(parse_launch_env(env_of(vars)),
                    Catch::Contains("SLURM_NTASKS=2 are set but SLURM_STEP_ID is not") &&
                        Catch::Contains("outside any job step") &&
                        Catch::Contains("start the program with srun"));
  // mpirun -np 2 in that script: Open MPI's variables, the innermost
  // launcher's, win over the batch script's Slurm ones.
  auto under_mpirun = vars;
  set(under_mpirun, "OMPI_COMM_WORLD_RANK", "1");
  set(under_mpirun, "OMPI_COMM_WORLD_SIZE", "2");
  set(under_mpirun, "OMPI_COMM_WORLD_LOCAL_RANK", "1");
  set(under_mpirun, "OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  set(under_mpirun, "MASTER_ADDR", "127.0.0.1");
  LaunchEnv mpi = parse_launch_env(env_of(under_mpirun));
  CHECK(mpi.launcher == "openmpi");
  CHECK(mpi.rank == 1);
  CHECK(mpi.world_size == 2);
  // One task in no step is a whole world: it runs.
  set(vars, "SLURM_NTASKS", "1");
  set(vars, "SLURM_TASKS_PER_NODE", "1");
  LaunchEnv one = parse_launch_env(env_of(vars));
  CHECK(one.world_size == 1);
  CHECK(one.master_port == 20000 + 77);
}

TEST_CASE("env: Slurm node lists and tasks per node", "[env]") {
  CHECK(first_host_of_nodelist("node1") == "node1");
  CHECK(first_host_of_nodelist("node1,node2") == "node1");
  CHECK(first_host_of_nodelist("gpu[03-05,9],cpu1") == "gpu03");
  CHECK(first_host_of_nodelist("rack[2,4]-n[001-010]") == "rack2-n001");
  CHECK(first_host_of_nodelist("x[9]") == "x9");
  CHECK_THROWS_AS(first_host_of_nodelist(""), InvalidArgument);
  CHECK_THROWS_AS(first_host_of_nodelist("a[1-2"), InvalidArgument);
  CHECK(tasks_on_node("4(x2),3", 0) == 4);
  CHECK(tasks_on_node("4(x2),3", 1) == 4);
  CHECK(tasks_on_node("4(x2),3", 2) == 3);
  CHECK(tasks_on_node("8", 0) == 8);
  CHECK_THROWS_WITH(tasks_on_node("4(x2),3", 3), Catch::Contains("names 3 nodes"));
  CHECK_THROWS_AS(tasks_on_node("four", 0), InvalidArgument);
}

TEST_CASE("env: Open MPI's variables", "[env]") {
  LaunchEnv e = parse_launch_env(env_of({{"OMPI_COMM_WORLD_RANK", "3"},
                                         {"OMPI_COMM_WORLD_SIZE", "4"},
                                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                         {"MASTER_ADDR", "host0"},
                                         {"MASTER_PORT", "29400"}}));
  CHECK(e.launcher == "openmpi");
  CHECK(e.rank == 3);
  CHECK(e.world_size == 4);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 2);
  CHECK(e.master_addr == "host0");
  CHECK(e.master_port == 29400);
  CHECK(e.group_rank == -1);  // Open MPI names no node index
  CHECK(e.group_world_size == -1);
  CHECK_THROWS_WITH(parse_launch_env(env_of({{"OMPI_COMM_WORLD_RANK", "0"}})),
                    Catch::Contains("OMPI_COMM_WORLD_SIZE is not set"));
  CHECK_THROWS_WITH(parse_launch_env(env_of({{"OMPI_COMM_WORLD_RANK", "0"},
                                             {"OMPI_COMM_WORLD_SIZE", "2"},
                                             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}})),
                    Catch::Contains("OMPI_COMM_WORLD_LOCAL_RANK is not set"));
}

TEST_CASE("env: OMPI_COMM_WORLD_NODE_RANK is a rank on the node, not a node index", "[env]") {
  // What `mpirun -np 2` sets for rank 1 on one node: NODE_RANK counts this
  // node's processes across all jobs, so it is 1 here, on the only node.
  LaunchEnv e = parse_launch_env(env_of({{"OMPI_COMM_WORLD_RANK", "1"},
                                         {"OMPI_COMM_WORLD_SIZE", "2"},
                                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                         {"OMPI_COMM_WORLD_NODE_RANK", "1"},
                                         {"MASTER_ADDR", "127.0.0.1"},
                                         {"MASTER_PORT", "29400"}}));
  CHECK(e.rank == 1);
  CHECK(e.world_size == 2);
  CHECK(e.local_rank == 1);
  CHECK(e.local_world_size == 2);
}

TEST_CASE("env: launched() is the test parse_launch_env makes", "[env]") {
  // Alone: nothing of any launcher (OMP_NUM_THREADS and the like do not count).
  CHECK_FALSE(launched(env_of({{"OMP_NUM_THREADS", "1"}, {"MASTER_PORT", "29500"}})));
  CHECK(launched(env_of({{"RANK", "0"}})));
  CHECK(launched(env_of({{"WORLD_SIZE", "2"}})));
  CHECK(launched(env_of({{"OMPI_COMM_WORLD_RANK", "1"}})));  // mpirun, no RANK
  CHECK(launched(env_of({{"SLURM_PROCID", "1"}})));          // srun, no RANK
  // Each launched environment parses (or names what is missing); none is
  // taken for a world of one.
  CHECK_THROWS_WITH(parse_launch_env(env_of({{"OMPI_COMM_WORLD_RANK", "1"}})),
                    Catch::Contains("OMPI_COMM_WORLD_SIZE"));
}
