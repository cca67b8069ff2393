// Which algorithm runs a collective of the host backend: a pure function of
// the op, its size, the knobs and the group's hosts, so every rank chooses
// alike (they must: each algorithm sends other bytes on other links), and a
// test can check the choice without any communication.
//
// A group whose ranks all share one host first tries shared memory
// (../shm/run_in_segment.h); what that leaves, and every group that spans
// hosts, is chosen here:
//   all_reduce      recursive doubling up to SPMD_TCP_SMALL_ALL_REDUCE_BYTES
//                   (latency), else the ring (bandwidth);
//   broadcast,      binomial trees up to SPMD_TCP_SMALL_ROOTED_BYTES, else
//   reduce          pipelined chains;
//   all_gather,     the ring;
//   reduce_scatter
//   all_to_all(v)   pairwise exchange; gather, scatter: direct to the root;
//   barrier         dissemination.
// Hierarchical (../tcp/hierarchical.h) replaces the ring of all_reduce,
// all_gather and reduce_scatter when the group spans at least two hosts
// with the same number (at least two) of ranks on each, as NCCL and Gloo
// do. SPMD_HIERARCHICAL says how:
//   auto (the default)  there, for all_gather and reduce_scatter at every
//                       size and all_reduce where the ring would run;
//   1                   there, for every size of all three (the small
//                       all_reduce too: for benchmarking);
//   0                   never (flat algorithms only).
// Every rank of a group must set it alike (../host/transport.h checks).
#pragma once

#include <cstddef>

#include "parallel/comm/tcp/tuning.h"
#include "parallel/comm/types.h"

namespace spmd::dist::host {

enum class Algorithm {
  kRing,
  kRecursiveDoubling,
  kHierarchical,
  kTree,
  kChain,
  kPairwise,
  kDirect,
  kDissemination,
};
// "ring", "recursive_doubling", "hierarchical", ...
const char* algorithm_name(Algorithm a);

enum class HierarchyMode { kAuto, kAlways, kNever };
// SPMD_HIERARCHICAL (auto, 1 or 0); InvalidArgument on another value.
HierarchyMode hierarchy_mode_from_env();
const char* hierarchy_mode_name(HierarchyMode m);  // "auto", "1", "0"

// The algorithm for a collective `op` whose buffer (the tensor, all_gather's
// output, reduce_scatter's input) holds `bytes`. `hierarchical_group`: the
// group spans hosts as hierarchical algorithms need (tcp::Hierarchy).
// REQUIRES: op is a collective (not send or recv).
Algorithm choose_algorithm(OpType op, size_t bytes, const tcp::Tuning& tuning,
                           bool hierarchical_group, HierarchyMode mode);

}  // namespace spmd::dist::host
