// Joining and leaving the job: rendezvous on a store, then the backend's
// process group over it.
#include "parallel/comm/init.h"

#include <cstdlib>

#include "parallel/comm/fake/fake_process_group.h"
#include "parallel/comm/host/host_process_group.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/rendezvous.h"
#include "runtime/socket.h"
#if SPMD_WITH_NCCL
#include "parallel/comm/nccl/nccl_process_group.h"
#endif

namespace spmd::dist {
namespace {

// A host every rank reaches (the store's), from which the TCP backend picks
// the interface it publishes: tcp://host:port's host; under env://, spmdrun's
// store (SPMD_AGENT_STORE) when there is one, else MASTER_ADDR.
std::string route_hint(const std::string& init_method) {
  try {
    if (init_method.rfind("tcp://", 0) == 0) {
      std::string rest = init_method.substr(6);
      rest = rest.substr(0, rest.find('?'));
      return net::parse_host_port(rest, 0, "init_method").host;
    }
    if (init_method.rfind("env://", 0) == 0) {
      LaunchEnv env = launch_env_from_environment();
      return env.agent_store_host.empty() ? env.master_addr : env.agent_store_host;
    }
  } catch (const Error&) {
  }
  return "";
}

// The fake backend's world: the rank and size given, else the launch
// environment's (RANK, WORLD_SIZE), with no rendezvous: no peer exists.
std::shared_ptr<ProcessGroup> fake_world(const InitOptions& options) {
  int rank = options.rank, world_size = options.world_size;
  if (rank < 0 || world_size < 1) {
    const LaunchEnv env = launch_env_from_environment();
    rank = env.rank, world_size = env.world_size;
  }
  return FakeProcessGroup::create(rank, world_size, {options.group_name, options.timeout, {}});
}

}  // namespace

CommBackend backend_from_environment(CommBackend backend) {
  const char* name = std::getenv("SPMD_BACKEND");
  return name && *name ? parse_backend(name) : backend;
}

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options) {
  if (backend_from_environment(options.backend) == CommBackend::kFake) return fake_world(options);
  std::shared_ptr<Store> store = options.store;
  int rank = options.rank, world_size = options.world_size, local_rank = options.rank;
  std::string hint;
  if (store) {
    SPMD_CHECK(rank >= 0 && world_size >= 1,
               "init_process_group: with an explicit store, pass "
               "rank and world_size (got rank ",
               rank, ", world_size ", world_size, ")");
  } else {
    Rendezvous rv = rendezvous(options.init_method, rank, world_size, options.timeout);
    store = rv.store;
    rank = rv.rank;
    world_size = rv.world_size;
    local_rank = rv.local_rank;
    hint = route_hint(options.init_method);
  }
  GroupOptions group{options.group_name, options.timeout, {}};
  if (backend_from_environment(options.backend) == CommBackend::kTcp) {
    return HostProcessGroup::create(store, rank, world_size, std::move(group), hint);
  }
#if SPMD_WITH_NCCL
  const int device = options.device >= 0 ? options.device : local_rank;
  return NcclProcessGroup::create(store, rank, world_size, std::move(group), device);
#else
  (void)local_rank;
  SPMD_THROW(Error,
             "init_process_group: the nccl backend needs a build of spmd with CUDA and NCCL "
             "(this one has SPMD_CUDA=OFF, found no nvcc, or found no NCCL: see cmake's "
             "note); use the tcp backend");
#endif
}

void destroy_process_group(std::shared_ptr<ProcessGroup>& group) {
  if (!group) return;
  std::shared_ptr<ProcessGroup> g = std::move(group);
  g->shutdown();  // finishes this rank's queued collectives
  if (!g->is_aborted()) {
    // No rank leaves before all are done (so rank 0, which may host the
    // store, serves it until nobody needs it).
    store_barrier(*g->store_ptr(), g->name() + "/destroy", g->rank(), g->size(), g->timeout());
  }
}

}  // namespace spmd::dist
