// What a launcher tells a process about its place in the job, read from the
// environment the way `env://` reads it in PyTorch. Three launchers are
// understood, tried innermost first: spmdrun/torchrun's variables, then Open
// MPI's, then Slurm's (mpirun inside a Slurm allocation leaves the
// allocation's SLURM_ variables in its processes, with the batch script's
// SLURM_PROCID):
//
//   spmdrun / torchrun   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//                        GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
//                        TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS,
//                        TORCHELASTIC_RUN_ID, and spmdrun's SPMD_AGENT_STORE
//   Slurm (srun)         SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
//                        SLURM_NNODES, SLURM_TASKS_PER_NODE, SLURM_STEP_ID; the
//                        master is the first host of SLURM_STEP_NODELIST (the
//                        step's nodes), else of SLURM_JOB_NODELIST; several
//                        tasks but no SLURM_STEP_ID (a batch script outside
//                        srun) is an error at once, not a wait for tasks that
//                        never start
//   Open MPI (mpirun)    OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//                        OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE
//                        (the rank among this job's processes on this node, and
//                        their count); Open MPI names no node index (its
//                        OMPI_COMM_WORLD_NODE_RANK is a rank on the node across
//                        all jobs), so the group rank and size stay unknown
//
// Under Slurm and Open MPI, MASTER_ADDR and MASTER_PORT still win when set.
// Slurm without MASTER_PORT gets a port derived from SLURM_JOB_ID and
// SLURM_STEP_ID (so every task of a step agrees, two steps of one job running
// at once differ, and two jobs on a node rarely collide); Open MPI, which
// names no host, needs MASTER_ADDR (`mpirun -x MASTER_ADDR=node0`).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace spmd {

struct LaunchEnv {
  std::string launcher;  // "torchrun" (spmdrun too), "slurm" or "openmpi"
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int group_rank = 0;        // the node's index among the job's nodes; -1: unknown
  int group_world_size = 1;  // the number of nodes; -1: unknown (Open MPI names neither)
  std::string master_addr;   // empty when the launcher named none
  int master_port = 0;       // 0 when the launcher named none
  int restart_count = 0;     // how many times the launcher restarted the group
  int max_restarts = 0;
  std::string run_id;
  // The store of spmdrun's agent (SPMD_AGENT_STORE=host:port): when set, every
  // rank connects to it and spmd binds nothing at MASTER_PORT, which stays
  // free for programs that host their own store there (PyTorch's rank 0 does).
  std::string agent_store_host;  // empty when not under spmdrun
  int agent_store_port = 0;
};

// Looks a variable up: its value, or nullopt when unset. (Injected so that
// tests can parse a made-up environment.)
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// Parses the environment of this process (getenv).
LaunchEnv launch_env_from_environment();
// Parses the environment that `lookup` describes. Throws InvalidArgument
// naming the variable when one is missing or malformed ("WORLD_SIZE='four' is
// not an integer"), or when the values disagree (RANK 4 with WORLD_SIZE 4).
LaunchEnv parse_launch_env(const EnvLookup& lookup);

// Whether any launcher's variables are set (the test parse_launch_env makes:
// RANK or WORLD_SIZE, OMPI_COMM_WORLD_RANK, SLURM_PROCID). A program for
// which this is false was started alone, a world of one; every spmd program
// asks this, never "is RANK set", so that mpirun and srun start real jobs.
bool launched(const EnvLookup& lookup);
bool launched();
// This process's rank as the innermost launcher's variable gives it (RANK,
// OMPI_COMM_WORLD_RANK, SLURM_PROCID), for labels (log lines, trace files);
// nullopt when alone or when the value is not a rank. Never throws.
std::optional<int> launcher_rank();

// The process-group timeout when a program names none (InitOptions::timeout):
// SPMD_PG_TIMEOUT_S seconds (above 0, at most a week) when set, else 5
// minutes. Throws InvalidArgument naming the variable when it is malformed.
std::chrono::milliseconds default_pg_timeout(const EnvLookup& lookup);
std::chrono::milliseconds default_pg_timeout();

// The first host of a Slurm node list: "gpu[03-05,9],cpu1" -> "gpu03".
// Errors name `variable`, where the list came from.
std::string first_host_of_nodelist(const std::string& nodelist,
                                   const std::string& variable = "SLURM_JOB_NODELIST");
// The store port of Slurm job step `step_id` of job `job_id` when MASTER_PORT
// is unset: 20000 + (job_id + 7919 * step_id) mod 12000, below Linux's
// ephemeral ports.
int slurm_store_port(uint64_t job_id, uint64_t step_id);
// The task count of node `node` from SLURM_TASKS_PER_NODE: "4(x2),3", 2 -> 3.
int tasks_on_node(const std::string& tasks_per_node, int node);

}  // namespace spmd
