// Which pairs of a group talk through shared memory and which through TCP.
//
// Two ranks share memory when they run on one host, which the store decides,
// not the address they publish (two containers on one machine may have
// different addresses, and one address may name several machines behind a
// NAT): each rank publishes <group>/host/<rank>, its host name, the kernel's
// boot id (/proc/sys/kernel/random/boot_id: differs between machines and
// between boots) and the device and inode of /dev/shm (differ between
// containers that do not share it). Equal identities mean one host.
//
// SPMD_TRANSPORT chooses:
//   auto (the default)  shared memory for same-host pairs, TCP for the rest;
//   shm                 shared memory for every pair, or an error naming a
//                       pair on different hosts;
//   tcp                 TCP for every pair.
// SPMD_TRANSPORT_HOST_SPLIT=k makes group ranks below k and ranks from k on
// count as two hosts (for tests and benchmarks: a mixed world on one
// machine, which also takes the hierarchical collectives of
// algorithm_choice.h). Every rank of a group must set both (and
// SPMD_SHM_SLOT_BYTES, SPMD_SHM_SEGMENT_MIN_BYTES, SPMD_SHM_POST_BYTES,
// SPMD_SHM_ZERO_COPY_BYTES, SPMD_HIERARCHICAL and
// SPMD_TCP_HIERARCHICAL_PIECE_BYTES) alike; a rank that does not gets an
// error naming both settings before any collective.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/host/algorithm_choice.h"
#include "parallel/comm/shm/tuning.h"
#include "parallel/comm/tcp/channel.h"
#include "parallel/comm/tcp/tuning.h"
#include "runtime/store.h"

namespace spmd::dist::host {

enum class Transport { kAuto, kShm, kTcp };

struct TransportChoice {
  Transport transport = Transport::kAuto;
  int host_split = 0;            // 0: none
  size_t slot_bytes = 0;         // SPMD_SHM_SLOT_BYTES (shm/tuning.h), which must also agree
  size_t segment_min_bytes = 0;  // SPMD_SHM_SEGMENT_MIN_BYTES (shm/tuning.h), likewise
  size_t post_bytes = 0;         // SPMD_SHM_POST_BYTES (shm/tuning.h), likewise
  size_t zero_copy_bytes = 0;    // SPMD_SHM_ZERO_COPY_BYTES (shm/tuning.h), likewise
  HierarchyMode hierarchy = HierarchyMode::kAuto;  // SPMD_HIERARCHICAL (algorithm_choice.h)
  size_t piece_bytes = 0;  // SPMD_TCP_HIERARCHICAL_PIECE_BYTES (tcp/tuning.h), likewise
};

// SPMD_TRANSPORT, SPMD_TRANSPORT_HOST_SPLIT and SPMD_HIERARCHICAL;
// InvalidArgument on a bad value.
TransportChoice transport_from_env();

// This process's host identity (see the file comment).
std::string host_identity();

struct ShmPlan {
  std::vector<bool> peers;   // [peer]: its pair uses shared memory (false for this rank)
  bool whole_group = false;  // every pair of the group does (the same on every rank)
  // [peer]: the host name in its identity when that identity differs from
  // this rank's (another host); "" for a peer on this host and for this rank.
  std::vector<std::string> other_hosts;
  // [rank]: its host, numbered in order of each host's first rank; ranks that
  // SPMD_TRANSPORT_HOST_SPLIT puts apart count as different hosts. The same
  // on every rank.
  std::vector<int> host_of;
};

// Which pairs use shared memory. Every rank of the group calls it: it
// publishes this rank's identity and reads the others'.
ShmPlan shm_peers(Store& store, const std::string& group, int rank, int size,
                  std::chrono::milliseconds timeout, const TransportChoice& choice);

// A group's channels to its peers ([rank] is null), for collectives and for
// point-to-point messages.
struct GroupChannels {
  std::vector<std::unique_ptr<tcp::Channel>> collective, p2p;
  // Every pair of the group was to use shared memory (decided alike on every
  // rank; a pair that fell back to TCP does not change it).
  bool whole_group_shm = false;
  // [peer]: "hostB at 10.0.0.2" (its host name, and its address as this
  // rank's socket to it sees it) for a peer on another host; "" for one on
  // this host and for this rank. What a failure names a lost peer by.
  std::vector<std::string> remote_hosts;
  std::vector<int> host_of;                        // ShmPlan's: [rank] its host
  HierarchyMode hierarchy = HierarchyMode::kAuto;  // SPMD_HIERARCHICAL, alike on every rank
};

// Connects the group: the sockets of every pair first (bootstrap.h), then,
// per SPMD_TRANSPORT, shared memory for the pairs on one host
// (shm_channel.h), whose sockets stay as doorbells. Every rank calls it; a
// bad setting fails before any connection is made.
GroupChannels connect_channels(Store& store, const std::string& group, int rank, int size,
                               std::chrono::milliseconds timeout, const std::string& route_hint,
                               const tcp::Tuning& tuning, const shm::ShmTuning& shm_tuning);

// Where `ranks` run, for a message about them: "" when none is on another
// host, " (on hostB at 10.0.0.2)" when they all are and on one host, else
// each remote host with its ranks: " (ranks 2, 3 on hostB at 10.0.0.2;
// rank 5 on hostC at 10.0.0.3)". remote_hosts is GroupChannels' field.
std::string where_ranks_run(const std::vector<int>& ranks,
                            const std::vector<std::string>& remote_hosts);

}  // namespace spmd::dist::host
