// The point-to-point engine's per-operation and per-peer state, shared by
// p2p.cpp (set-up, the thread, sending, deadlines) and p2p_receive.cpp (the
// receive state machine and tag matching). Internal to the engine.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/tcp/p2p.h"

namespace spmd::dist::tcp {

struct P2PEngine::Op {
  bool is_send = false;
  int peer = 0, tag = 0;
  char* data = nullptr;
  size_t count = 0, bytes = 0;
  DType dtype = DType::kF32;
  Header header;    // sends: the frame's header
  size_t done = 0;  // sends: bytes of header + payload written
  std::string refused;  // sends: the receiver's refusal, failing the Work once written
  std::string text;     // a refusal frame's own payload (p2p_refusal.cpp)
  Work work;
  Clock::time_point deadline;
};

// A message that arrived before its recv, read into memory of its own. A
// recv posted while it is still arriving claims it and completes with it.
struct P2PEngine::Unexpected {
  Header header;
  std::vector<char> data;
  bool complete = false;
  std::unique_ptr<Op> claimant;
};

struct P2PEngine::Peer {
  enum class In { kHeader, kParked, kPayload };
  enum class Target { kRecv, kUnexpected, kDiscard, kRefusal };

  int rank = 0;
  std::unique_ptr<Channel> channel;  // null for this rank
  int fd = -1;                       // the channel's, for poll() and epoll
  std::string dead;                  // why the connection is unusable; empty while it works
  // Sending: the front op is being written.
  std::deque<std::unique_ptr<Op>> sends;
  uint64_t send_seq = 0;
  // Receiving.
  std::deque<std::unique_ptr<Op>> recvs;  // posted, not yet matched
  In in = In::kHeader;
  Header header;
  size_t header_done = 0;
  uint64_t recv_seq = 0;
  Target target = Target::kDiscard;
  std::unique_ptr<Op> receiving;  // the recv being filled
  std::deque<Unexpected> unexpected;
  std::string refusal;  // a refusal frame's text, as it arrives
  char* payload = nullptr;
  size_t payload_bytes = 0, payload_done = 0;
};

}  // namespace spmd::dist::tcp
