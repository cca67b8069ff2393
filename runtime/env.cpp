// Reading the launcher's variables: one small parser per launcher, each
// filling a LaunchEnv, and one consistency check at the end.
#include "runtime/env.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "runtime/error.h"
#include "runtime/flag_checks.h"
#include "runtime/socket.h"

namespace spmd {
namespace {

// Reads integer variables with messages that name them.
class Vars {
 public:
  explicit Vars(const EnvLookup& lookup) : lookup_(lookup) {}

  bool has(const std::string& name) const { return lookup_(name).has_value(); }
  std::optional<std::string> text(const std::string& name) const { return lookup_(name); }

  int required_int(const std::string& name, const std::string& launcher) const {
    std::optional<std::string> v = lookup_(name);
    SPMD_CHECK(v.has_value(), "env://: ", name, " is not set (", launcher,
               " sets it; without a launcher, use tcp://host:port with an explicit rank and "
               "world size)");
    return parse(name, *v);
  }

  int optional_int(const std::string& name, int fallback) const {
    std::optional<std::string> v = lookup_(name);
    return v ? parse(name, *v) : fallback;
  }

  static int parse(const std::string& name, const std::string& value) {
    char* end = nullptr;
    long n = std::strtol(value.c_str(), &end, 10);
    SPMD_CHECK(!value.empty() && *end == '\0', "env://: ", name, "='", value,
               "' is not an integer");
    SPMD_CHECK(n >= 0 && n <= (1L << 30), "env://: ", name, "=", n, " is out of range");
    return static_cast<int>(n);
  }

 private:
  const EnvLookup& lookup_;
};

void read_master(const Vars& v, LaunchEnv& env) {
  if (std::optional<std::string> addr = v.text("MASTER_ADDR")) env.master_addr = *addr;
  env.master_port = v.optional_int("MASTER_PORT", env.master_port);
}

LaunchEnv from_torchrun(const Vars& v) {
  LaunchEnv env;
  env.launcher = "torchrun";
  env.rank = v.required_int("RANK", "spmdrun or torchrun");
  env.world_size = v.required_int("WORLD_SIZE", "spmdrun or torchrun");
  // Without the local variables, the job is taken to be one node.
  env.local_rank = v.optional_int("LOCAL_RANK", env.rank);
  env.local_world_size = v.optional_int("LOCAL_WORLD_SIZE", env.world_size);
  env.group_rank = v.optional_int("GROUP_RANK", 0);
  env.group_world_size = v.optional_int("GROUP_WORLD_SIZE", 1);
  env.restart_count = v.optional_int("TORCHELASTIC_RESTART_COUNT", 0);
  env.max_restarts = v.optional_int("TORCHELASTIC_MAX_RESTARTS", 0);
  env.run_id = v.text("TORCHELASTIC_RUN_ID").value_or("");
  if (std::optional<std::string> store = v.text("SPMD_AGENT_STORE")) {
    net::HostPort hp =
        net::parse_host_port(*store, -1, "env://: SPMD_AGENT_STORE (spmdrun's store)");
    env.agent_store_host = hp.host;
    env.agent_store_port = hp.port;
  }
  read_master(v, env);
  return env;
}

// The job step's id (SLURM_STEP_ID, or its older name SLURM_STEPID); nullopt
// outside a step, as in the batch script itself.
std::optional<uint64_t> slurm_step(const Vars& v) {
  for (const char* name : {"SLURM_STEP_ID", "SLURM_STEPID"}) {
    std::optional<std::string> text = v.text(name);
    if (!text) continue;
    char* end = nullptr;
    const unsigned long long id = std::strtoull(text->c_str(), &end, 10);
    SPMD_CHECK(!text->empty() && (*text)[0] != '-' && *end == '\0' && id <= 0xffffffffULL,
               "env://: ", name, "='", *text, "' is not a job step id");
    return id;
  }
  return std::nullopt;
}

LaunchEnv from_slurm(const Vars& v) {
  LaunchEnv env;
  env.launcher = "slurm";
  env.rank = v.required_int("SLURM_PROCID", "srun");
  env.world_size = v.required_int("SLURM_NTASKS", "srun");
  const std::optional<uint64_t> step = slurm_step(v);
  // The batch script of `sbatch -n2` (or an salloc shell) has SLURM_PROCID=0
  // and SLURM_NTASKS=2 but is no task of a step: the other task never starts.
  SPMD_CHECK(step || env.world_size == 1, "env:// (slurm): SLURM_PROCID=", env.rank,
             " and SLURM_NTASKS=", env.world_size,
             " are set but SLURM_STEP_ID is not: this process runs in the job's batch script "
             "or an salloc shell, outside any job step, and the other ",
             env.world_size - 1,
             " task(s) will never start; start the program with srun (srun PROGRAM, one task "
             "per rank) or with spmdrun");
  env.local_rank = v.required_int("SLURM_LOCALID", "srun");
  env.group_rank = v.optional_int("SLURM_NODEID", 0);
  env.group_world_size = v.optional_int("SLURM_NNODES", 1);
  std::optional<std::string> per_node = v.text("SLURM_TASKS_PER_NODE");
  env.local_world_size = per_node ? tasks_on_node(*per_node, env.group_rank) : env.world_size;
  env.restart_count = v.optional_int("SLURM_RESTART_COUNT", 0);
  env.run_id = v.text("SLURM_JOB_ID").value_or("");
  // Rank 0 of a step runs on the first host of the step's nodes, which may
  // be a subset of the job's.
  if (std::optional<std::string> nodes = v.text("SLURM_STEP_NODELIST"))
    env.master_addr = first_host_of_nodelist(*nodes, "SLURM_STEP_NODELIST");
  else if (std::optional<std::string> job_nodes = v.text("SLURM_JOB_NODELIST"))
    env.master_addr = first_host_of_nodelist(*job_nodes);
  if (!env.run_id.empty())
    env.master_port = slurm_store_port(Vars::parse("SLURM_JOB_ID", env.run_id), step.value_or(0));
  read_master(v, env);
  return env;
}

LaunchEnv from_openmpi(const Vars& v) {
  LaunchEnv env;
  env.launcher = "openmpi";
  env.rank = v.required_int("OMPI_COMM_WORLD_RANK", "mpirun");
  env.world_size = v.required_int("OMPI_COMM_WORLD_SIZE", "mpirun");
  // This job's processes on this node, as Open MPI documents them.
  env.local_rank = v.required_int("OMPI_COMM_WORLD_LOCAL_RANK", "mpirun");
  env.local_world_size = v.required_int("OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun");
  // OMPI_COMM_WORLD_NODE_RANK is not a node index (it counts this node's
  // processes of every job), and no documented variable gives one.
  env.group_rank = -1;
  env.group_world_size = -1;
  read_master(v, env);
  return env;
}

void check_consistent(const LaunchEnv& e) {
  const std::string& l = e.launcher;
  SPMD_CHECK(e.world_size >= 1, "env:// (", l, "): the world size is ", e.world_size,
             "; it must be at least 1");
  SPMD_CHECK(e.rank < e.world_size, "env:// (", l, "): rank ", e.rank,
             " is not below the world size ", e.world_size);
  SPMD_CHECK(e.local_world_size >= 1 && e.local_rank < e.local_world_size, "env:// (", l,
             "): local rank ", e.local_rank, " is not below the local world size ",
             e.local_world_size);
  SPMD_CHECK(e.group_world_size < 0 || e.group_rank < std::max(e.group_world_size, 1), "env:// (",
             l, "): group rank ", e.group_rank, " is not below the group world size ",
             e.group_world_size);
  SPMD_CHECK(e.master_port <= 65535, "env:// (", l, "): MASTER_PORT=", e.master_port,
             " is not a port (1..65535)");
}

}  // namespace

LaunchEnv parse_launch_env(const EnvLookup& lookup) {
  Vars v(lookup);
  LaunchEnv env;
  if (v.has("RANK") || v.has("WORLD_SIZE")) {
    env = from_torchrun(v);
  } else if (v.has("OMPI_COMM_WORLD_RANK")) {  // before Slurm's: see env.h
    env = from_openmpi(v);
  } else if (v.has("SLURM_PROCID")) {
    env = from_slurm(v);
  } else {
    SPMD_THROW(InvalidArgument,
               "env://: no launcher variables found (RANK and WORLD_SIZE from spmdrun or "
               "torchrun, SLURM_PROCID from srun, OMPI_COMM_WORLD_RANK from mpirun)");
  }
  check_consistent(env);
  return env;
}

bool launched(const EnvLookup& lookup) {
  for (const char* name : {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) {
    if (lookup(name)) return true;
  }
  return false;
}

namespace {

std::optional<std::string> getenv_lookup(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

}  // namespace

bool launched() { return launched(getenv_lookup); }

std::optional<int> launcher_rank() {
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long r = std::strtol(v, &end, 10);
    if (*end != '\0' || r < 0 || r > 1 << 30) return std::nullopt;
    return int(r);
  }
  return std::nullopt;
}

LaunchEnv launch_env_from_environment() {
  return parse_launch_env([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  });
}

int slurm_store_port(uint64_t job_id, uint64_t step_id) {
  // 20000..31999 lies below Linux's ephemeral ports (32768 up), so no
  // outgoing connection on the node holds the store's port. 7919 is prime,
  // so coprime with 12000: the steps of one job get distinct ports (until
  // 12000 steps), and step 0 gets the job's own.
  return static_cast<int>(20000 + (job_id + 7919 * step_id) % 12000);
}

std::string first_host_of_nodelist(const std::string& nodelist, const std::string& variable) {
  SPMD_CHECK(!nodelist.empty(), variable, " is empty");
  // The first entry ends at the first comma outside brackets.
  size_t end = 0;
  for (int depth = 0; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  std::string first = nodelist.substr(0, end);
  // Each bracket group becomes its first member: "gpu[03-05,9]" -> "gpu03"
  // (zero padding kept), "rack[2,4]-n[001-010]" -> "rack2-n001".
  for (size_t open; (open = first.find('[')) != std::string::npos;) {
    size_t close = first.find(']', open);
    SPMD_CHECK(close != std::string::npos, variable, "='", nodelist, "': missing ']'");
    std::string range = first.substr(open + 1, close - open - 1);
    std::string start = range.substr(0, range.find_first_of(",-"));
    SPMD_CHECK(!start.empty(), variable, "='", nodelist, "': empty range");
    first = first.substr(0, open) + start + first.substr(close + 1);
  }
  return first;
}

int tasks_on_node(const std::string& tasks_per_node, int node) {
  // Entries "N" or "N(xR)" (N tasks on each of R nodes), separated by commas.
  int seen = 0;
  size_t pos = 0;
  while (pos < tasks_per_node.size()) {
    size_t comma = tasks_per_node.find(',', pos);
    std::string entry =
        tasks_per_node.substr(pos, comma == std::string::npos ? comma : comma - pos);
    int count = 0, repeat = 1;
    int fields = std::sscanf(entry.c_str(), "%d(x%d)", &count, &repeat);
    SPMD_CHECK(fields >= 1 && count >= 1 && repeat >= 1, "SLURM_TASKS_PER_NODE='", tasks_per_node,
               "': cannot read '", entry, "'");
    if (node < seen + repeat) return count;
    seen += repeat;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  SPMD_THROW(InvalidArgument, "SLURM_TASKS_PER_NODE='", tasks_per_node, "' names ", seen,
             " nodes; node ", node, " is not among them");
}

std::chrono::milliseconds default_pg_timeout(const EnvLookup& lookup) {
  const std::optional<std::string> text = lookup("SPMD_PG_TIMEOUT_S");
  if (!text) return std::chrono::minutes(5);
  const std::string err = flags::number_error(*text, 0, flags::kMaxTimeoutSeconds, true);
  SPMD_CHECK(err.empty(), "SPMD_PG_TIMEOUT_S ", err, " (seconds, above 0 and at most ",
             flags::kMaxTimeoutSeconds, ")");
  return std::chrono::milliseconds(int64_t(std::ceil(std::stod(*text) * 1000)));
}

std::chrono::milliseconds default_pg_timeout() {
  return default_pg_timeout([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  });
}

}  // namespace spmd
