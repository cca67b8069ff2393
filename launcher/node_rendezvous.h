// How the launchers of a job's nodes find each other: the chapter's 16.1.3 at
// the scale of machines. Node 0's launcher (or, with no --node-rank, the one
// that can bind the endpoint) hosts a TCPStore; every launcher connects to it
// and joins a *round*: it takes a node rank, writes how many workers it runs,
// waits until all --nnodes launchers have joined, and reads everyone's counts
// to place its workers' global ranks. Round r+1 is the rendezvous after the
// r-th restart. Node 0 also chooses, each round, the workers' MASTER_ADDR
// and MASTER_PORT: its own address and a port that nothing holds, which the
// program may bind (PyTorch's rank 0 hosts its store there, as under
// torchrun). The same store then carries the news of a failure between the
// nodes, and spmd workers use it too (SPMD_AGENT_STORE), under keys of their
// own.
//
// Keys (under "spmdrun/<run id>/"):
//   round<r>/arrivals, round<r>/claim/<n>  node ranks (dynamic or static)
//   round<r>/node/<n> = "<nproc> <host>"    what node n runs
//   round<r>/master = "<port>[ <addr>]"     the workers' MASTER_PORT, and their
//                                           MASTER_ADDR if node 0 is not the store's host
//   round<r>/join/...                       the join barrier
//   round<r>/failed = "<what>"              the first failure of the round
//   round<r>/done/<n>                       node n's workers all succeeded
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "launcher/options.h"
#include "runtime/socket.h"
#include "runtime/store.h"

namespace spmd {
class TCPStore;
}

namespace spmd::launcher {

// Where this node's workers sit in the job.
struct NodeAssignment {
  int group_rank = 0;        // this node's index
  int group_world_size = 1;  // the number of nodes
  int rank_offset = 0;       // the global rank of local rank 0
  int local_world_size = 1;  // workers on this node
  int world_size = 1;        // workers in the job
  // The workers' MASTER_ADDR and MASTER_PORT: node 0's address as this node
  // reaches it, and a port on it that was free when node 0 chose it (the same
  // on every node).
  std::string master_addr;
  int master_port = 0;
};

class NodeRendezvous {
 public:
  // Hosts or connects to the store the options name. `check_interrupt` is
  // called between short waits and may throw (the launcher's signals), so a
  // long wait can always be cut short. With SPMD_SOCKET_IFNAME set, the store
  // hosted here listens on that interface's address alone, and every
  // connection to the store leaves from it.
  // Throws CommError when the port to host is taken ("already in use"),
  // TimeoutError when the store is unreachable within --rdzv-timeout (naming
  // the variable when it chose the source address), InvalidArgument when the
  // variable names no interface, or when node 0 would host the store on an
  // address other than the --master-addr that the other nodes are given.
  NodeRendezvous(const LaunchOptions& options, std::function<void()> check_interrupt);
  ~NodeRendezvous();

  // Joins round `round` and returns this node's place in it. Throws
  // TimeoutError naming the node ranks that never joined, InvalidArgument
  // when two launchers claim one node rank or too many launchers join.
  NodeAssignment join(int round);

  // Records the round's first failure for the other nodes (a later one is
  // dropped). `what` is one line.
  void report_failure(int round, const std::string& what);
  // The round's first failure, if some node reported one.
  std::optional<std::string> failure(int round);
  // This node's workers all succeeded; true once every node said so.
  void mark_done(int round, int group_rank);
  bool all_done(int round);

  // The store's address as workers should reach it (their SPMD_AGENT_STORE);
  // when this launcher hosts it with SPMD_SOCKET_IFNAME set, that interface's
  // address.
  const std::string& store_host() const { return store_host_; }
  int store_port() const { return store_port_; }
  bool hosting() const;
  // The store itself, without the launcher's prefix: the keys the workers
  // write (attempt_<N>/...), for hang triage.
  Store& worker_store();

 private:
  // Binds the endpoint when this launcher is to host the store (sets
  // store_host_/store_port_ either way); an invalid socket otherwise.
  net::Socket claim_endpoint(bool* bound_all);
  // With SPMD_SOCKET_IFNAME set and several nodes: throws InvalidArgument
  // when `host`, the endpoint the other nodes are given, is an IPv4 address
  // that is not the interface's (they would look for the store where it is not).
  void check_store_host(const std::string& host) const;
  // Starts the server on `listener` when valid, then connects, retrying in
  // short slices until --rdzv-timeout.
  void connect(net::Socket listener, bool bound_all);
  int take_node_rank(const std::string& round_key);
  void wait_for_nodes(const std::string& round_key, int node_rank);
  // Node 0's choice of the workers' MASTER_PORT, and of MASTER_ADDR when it
  // does not host the store: "<port>" or "<port> <addr>".
  std::string choose_worker_master();

  const LaunchOptions& options_;
  std::function<void()> check_interrupt_;
  // The interface SPMD_SOCKET_IFNAME names: the store listens on its address
  // (when hosted here) and this launcher connects from it.
  std::optional<net::NamedInterface> interface_;
  std::string store_host_;
  int store_port_ = 0;
  int node_rank_ = -1;  // fixed by --node-rank; -1: taken by arrival order
  std::shared_ptr<TCPStore> tcp_;
  std::shared_ptr<Store> store_;  // tcp_ under the run's prefix
};

}  // namespace spmd::launcher
