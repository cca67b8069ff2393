// All-to-all: every rank sends a distinct block to every other rank.
//
// Rank r's input is cut into p blocks (of equal or given sizes); block j goes
// to rank j, and rank r's output block i is what rank i sent it. Rank r
// posts every send and every receive at once, rank r+s receiving in the
// order s = 1..p-1 (so that at any moment the ranks' traffic is spread over
// different pairs), fills the socket buffers, copies its own block locally
// while the peers drain them, and then the Mesh moves the rest together as
// the sockets allow.
//
// Cost: (p-1) · α + (p-1)/p · nβ with n the bytes a rank sends, if the
// links run in parallel; on one machine they share the memory bus, so it is
// the copies through the kernel that bound it.
//
// Each pair's header carries the size of that pair's block, so a rank whose
// send sizes disagree with the receiver's expected sizes is caught. The same
// class runs all_to_allv, whose blocks lie at offsets of its own choosing.
#pragma once

#include <vector>

#include "parallel/comm/tcp/algorithm.h"

namespace spmd::dist::tcp {

class AllToAll {
 public:
  // send_counts[j] / recv_counts[i]: elements to rank j / from rank i;
  // send_offsets / recv_offsets: where those blocks start in input / output
  // (empty: back to back in rank order).
  AllToAll(const Context& ctx, Span input, Span output, std::vector<size_t> send_counts,
           std::vector<size_t> recv_counts, std::vector<size_t> send_offsets = {},
           std::vector<size_t> recv_offsets = {});
  void run();

 private:
  Context ctx_;
  Span input_, output_;
  std::vector<size_t> send_counts_, recv_counts_;
  std::vector<size_t> send_offsets_, recv_offsets_;
};

}  // namespace spmd::dist::tcp
