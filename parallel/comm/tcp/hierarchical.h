// Hierarchical collectives: for a group whose ranks sit on several hosts, L
// ranks on each, where the links within a host (shared memory) are much
// faster than the links across hosts (the network). A flat ring crosses the
// network wherever the ring passes from one host to the next, and each of
// those links carries 2(p-1)/p of the buffer; the hierarchical forms send
// every byte across once and do the rest within the hosts:
//
//   all_reduce:     reduce-scatter within each host (rank l of a host ends
//                   with slice l summed over its host), all_reduce of slice l
//                   across the hosts among the ranks of local index l (one
//                   rank per host: the "rail" of l, as NCCL calls it), then
//                   all-gather within each host;
//   all_gather:     all-gather along the rail (rank l of each host gets the
//                   block of every host's rank l), then within each host;
//   reduce_scatter: reduce-scatter within each host, then along the rail.
//
// With H hosts the network carries, per host and direction, 2(H-1)/H of the
// buffer for all_reduce (a flat ring: 2(p-1)/p, and for 2 hosts × 2 ranks
// 1.5 times as much), (H-1)/H for all_gather and reduce_scatter (flat:
// (p-1)/p). Every phase is a ring (ring.h) on a subset of the group's links.
//
// Pipelining. The buffer is cut into pieces (Tuning::hierarchical_piece_bytes)
// and the phases run as a software pipeline, a tick at a time: in tick t of
// an all_reduce the hosts reduce-scatter piece t while the rails all-reduce
// piece t-1 and the hosts all-gather piece t-2. The rails' ring and the
// hosts' rings use different links and run at once (Ring::advance); the
// hosts' rings share their links and so run one after another, in the same
// order on every rank, as a link's bytes arrive in the order they were sent.
// So the slow transfer across hosts goes on while the fast steps within them
// happen, and costs about what it would alone.
//
// Not here: which groups take this path and when (../host/algorithm_choice.h),
// and trees across hosts for small messages.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "parallel/comm/tcp/ring.h"

namespace spmd::dist::tcp {

// The hosts of a group, as the hierarchical algorithms see them.
struct Hierarchy {
  std::vector<std::vector<int>> hosts;  // [h]: its group ranks, ascending; hosts by first rank
  int host = 0;                         // this rank's host
  int local = 0;                        // this rank's place among its host's ranks

  // From each group rank's host (any numbering): nullopt unless there are
  // at least two hosts and every host has the same number, at least two, of
  // ranks.
  static std::optional<Hierarchy> of_hosts(const std::vector<int>& host_of, int rank);
  int host_count() const { return int(hosts.size()); }
  int ranks_per_host() const { return int(hosts[0].size()); }
  const std::vector<int>& host_ranks() const { return hosts[host]; }
  // The rail: the rank of this rank's local index on every host, in host order.
  std::vector<int> rail() const;
  // "2 hosts x 2 ranks".
  std::string describe() const;
};

// The pieces a buffer of `bytes` (of `elements` elements) is pipelined in: about
// tuning.hierarchical_piece_bytes each, at least one, at most one per element.
size_t piece_count(size_t bytes, size_t elements, const Tuning& tuning);

// all_reduce of `data` in place. `across` is the rails' Workspace (theirs
// and the hosts' rings run at once, so they may not share one).
class HierarchicalAllReduce {
 public:
  HierarchicalAllReduce(const Context& ctx, Workspace& across, const Hierarchy& hierarchy,
                        Span data, ReduceOp op);
  void run();

 private:
  Span piece(size_t t) const;
  Ring host_reduce_scatter(size_t t) const;
  Ring rail_all_reduce(size_t t) const;
  Ring host_all_gather(size_t t) const;

  Context ctx_, rail_ctx_;
  const Hierarchy& hierarchy_;
  Span data_;
  ReduceOp op_;
  size_t pieces_;
};

// all_gather in place: `data` holds p·m elements, block r (this rank's)
// already filled.
class HierarchicalAllGather {
 public:
  HierarchicalAllGather(const Context& ctx, Workspace& across, const Hierarchy& hierarchy,
                        Span data);
  void run();

 private:
  Context ctx_, rail_ctx_;
  const Hierarchy& hierarchy_;
  Span data_;
  size_t block_, pieces_;  // m; pieces of each block
};

// reduce_scatter: `input` holds p·m elements, this rank's `output` (m) gets
// block r of the combination; input is not modified.
class HierarchicalReduceScatter {
 public:
  HierarchicalReduceScatter(const Context& ctx, Workspace& across, const Hierarchy& hierarchy,
                            Span input, Span output, ReduceOp op);
  void run();

 private:
  Context ctx_, rail_ctx_;
  const Hierarchy& hierarchy_;
  Span input_, output_;
  Span host_sums_;  // input's shape: each block's piece combined over this host
  ReduceOp op_;
  size_t block_, pieces_;
};

}  // namespace spmd::dist::tcp
