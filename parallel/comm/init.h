// init_process_group: how a program joins its job, as in torch.distributed.
//
//   auto world = dist::init_process_group({.backend = dist::CommBackend::kTcp});
//   world->all_reduce(grad).wait();
//   dist::destroy_process_group(world);
//
// The init method says how the ranks find each other (runtime/rendezvous.h):
// env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun, Slurm or
// Open MPI set them; under spmdrun, its agent's store at SPMD_AGENT_STORE),
// tcp://host:port, file:///path, or a Store the caller already built. The
// process group is then connected over that store.
//
// There is no hidden global "default group": init_process_group returns the
// world group and code passes the groups it uses explicitly (a DeviceMesh
// holds one per axis), so a reader always sees which ranks a collective spans
// and no file reaches into a singleton (docs/comm.md says why).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "parallel/comm/process_group.h"
#include "parallel/comm/types.h"
#include "runtime/env.h"
#include "runtime/store.h"

namespace spmd::dist {

struct InitOptions {
  CommBackend backend = CommBackend::kTcp;
  // env://, tcp://host:port or file:///path; ignored when `store` is set.
  std::string init_method = "env://";
  // An explicit store every rank shares (then rank and world_size are required).
  std::shared_ptr<Store> store;
  // -1: from the environment or the init method's query.
  int world_size = -1;
  int rank = -1;
  // Bounds the rendezvous and, afterwards, every collective (torch's
  // init_process_group(timeout=)); by default SPMD_PG_TIMEOUT_S seconds, or
  // 5 minutes (runtime/env.h).
  std::chrono::milliseconds timeout = default_pg_timeout();
  std::string group_name = "world";
  // NCCL: the GPU this rank drives (-1: its local rank).
  int device = -1;
};

// SPMD_BACKEND ("tcp", "gloo", "nccl" or "fake") when set, else `backend`:
// what init_process_group runs on. With "fake" (fake/fake_process_group.h)
// the process is one rank of a world that is not there: rank and
// world_size from the options, else from RANK and WORLD_SIZE, and no
// rendezvous.
CommBackend backend_from_environment(CommBackend backend);

// Joins the job and returns the world process group (every rank calls it).
// Throws InvalidArgument for a bad method or missing rank, TimeoutError naming
// the ranks that never joined, Error when the backend is not built in.
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options = {});

// Leaves cleanly: finishes this rank's queued collectives, shuts the group
// down, then waits until every rank of the group has done the same (so rank
// 0, which may host the store, outlives everyone's use of it), and sets
// `group` to null. After a failure the group is only shut down, without
// waiting for ranks that may be gone.
void destroy_process_group(std::shared_ptr<ProcessGroup>& group);

}  // namespace spmd::dist
