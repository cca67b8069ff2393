// Rendezvous: how the processes of a job find each other before any
// communicator exists. Given an init method, it builds the job's Store and
// waits until every rank has joined it; parallel/comm's init_process_group
// calls it first and builds the process group on the store it returns (as
// torch.distributed.init_process_group calls torch.distributed.rendezvous).
//
//   env://                    the launcher's variables (runtime/env.h): rank 0
//                             hosts a TCPStore at MASTER_ADDR:MASTER_PORT and the
//                             others connect; under spmdrun every rank connects
//                             to the agent's store at SPMD_AGENT_STORE=host:port
//                             instead, and MASTER_PORT is left unbound
//   tcp://host:port           the same with an explicit address
//   file:///path/to/file      a FileStore on a filesystem every rank can see
//
// tcp:// and file:// take the rank and world size from the arguments or from
// the query (`tcp://node0:29500?rank=1&world_size=4`).
//
// With SPMD_SOCKET_IFNAME set, a TCPStore's server listens on that
// interface's address alone (unless spawn() handed it a bound socket), and
// every client connects from it.
#pragma once

#include <memory>
#include <string>

#include "runtime/store.h"

namespace spmd {

struct Rendezvous {
  std::shared_ptr<Store> store;  // every rank has joined it; keys are the caller's
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // from the launcher under env://; the rank otherwise
};

// Builds the store named by init_method and performs the join barrier.
// rank and world_size: -1 to take them from the environment or the URL.
// REQUIRES: every rank of the job calls it with the same method and timeout.
// Rank 0's store hosts the server for tcp:// and plain env://: keep it alive
// until every rank is done with the store (destroy_process_group waits first).
// Throws InvalidArgument for a malformed method or missing rank or world size,
// TimeoutError naming the ranks that never joined, CommError when the port of
// the server is taken.
Rendezvous rendezvous(const std::string& init_method, int rank = -1, int world_size = -1,
                      Store::Duration timeout = Store::kDefaultTimeout);

// Waits until `world_size` ranks have called it with the same name; may be
// called again with the same name (each round is a new generation). Throws
// TimeoutError listing the ranks that had not arrived when the timeout passed,
// and InvalidArgument, on every rank, when two processes say they are the
// same rank (naming both: pid and host).
void store_barrier(Store& store, const std::string& name, int rank, int world_size,
                   Store::Duration timeout);

// The variable through which spawn() hands rank 0 an already bound listening
// socket for its TCPStore server, so no other process can take MASTER_PORT
// between the choice of the port and its use.
inline constexpr const char* kStoreListenFdVar = "SPMD_STORE_LISTEN_FD";

}  // namespace spmd
