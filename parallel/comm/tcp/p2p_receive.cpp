// The receive side of the point-to-point engine: a per-peer state machine
// (read a header, match it to a recv by tag, read the payload straight into
// the recv's buffer) with MPI's matching rules, parking and spilling.
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "parallel/comm/tcp/p2p.h"
#include "parallel/comm/tcp/p2p_state.h"
#include "runtime/error.h"

namespace spmd::dist::tcp {
namespace {
char g_discard[1 << 16];  // where discarded payloads are read (never looked at)
}  // namespace

// Matches a new recv against what already arrived, else queues it.
void P2PEngine::post_recv(Peer& peer, std::unique_ptr<Op> op) {
  for (Unexpected& u : peer.unexpected) {
    if (u.header.arg != op->tag || u.claimant) continue;
    u.claimant = std::move(op);
    deliver_unexpected(peer);
    return;
  }
  if (!peer.dead.empty()) {  // nothing more can come from this peer
    finish(op->work,
           std::make_exception_ptr(CommError(str_cat(describe_op(*op), ": ", peer.dead))));
    return;
  }
  if (peer.in == Peer::In::kParked && peer.header.arg == op->tag) {
    peer.recvs.push_front(std::move(op));  // the parked message is its match
    peer.in = Peer::In::kHeader;
    on_header(peer);
    read_some(peer);
    return;
  }
  peer.recvs.push_back(std::move(op));
  if (peer.in == Peer::In::kParked) {
    spill_parked(peer);  // the new recv may want the bytes behind the parked message
    read_some(peer);
  }
}

// Reads as far as the socket and the state machine allow.
void P2PEngine::read_some(Peer& peer) {
  while (peer.dead.empty()) {
    if (peer.in == Peer::In::kParked) return;
    if (peer.in == Peer::In::kHeader) {
      if (!read_into(peer, reinterpret_cast<char*>(&peer.header), sizeof(Header),
                     peer.header_done)) {
        return;
      }
      peer.header_done = 0;
      on_header(peer);
      continue;
    }
    // kPayload; discarded bytes go through a scratch buffer, a piece at a time.
    if (peer.target == Peer::Target::kDiscard) {
      size_t piece = std::min(sizeof g_discard, peer.payload_bytes - peer.payload_done);
      size_t got = 0;
      const bool full = read_into(peer, g_discard, piece, got);
      peer.payload_done += got;
      if (!full) return;
      if (peer.payload_done < peer.payload_bytes) continue;
    } else if (!read_into(peer, peer.payload, peer.payload_bytes, peer.payload_done)) {
      return;
    }
    on_payload_done(peer);
  }
}

// Reads into dst until `done` reaches n; false when the socket ran dry first.
bool P2PEngine::read_into(Peer& peer, char* dst, size_t n, size_t& done) {
  while (done < n) {
    const iovec iov{dst + done, n - done};
    const ssize_t r = peer.channel->read(&iov, 1);
    if (r > 0) {
      done += size_t(r);
      ++progress_;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    fail_peer(peer, str_cat("lost rank ", peer.rank, " (",
                            r == 0 ? "the peer closed the connection" : std::strerror(errno),
                            "; it exited, was killed, or aborted)"));
    return false;
  }
  return true;
}

// A header has arrived: match it to the oldest posted recv with its tag, or
// park it in the socket until one is posted.
void P2PEngine::on_header(Peer& peer) {
  const Header& h = peer.header;
  if (begin_refusal(peer)) return;  // the peer refused a message of this rank's
  if (h.magic != kMagic || h.group != group_hash(group_) || h.op != OpType::kSend ||
      !is_comm_dtype(h.dtype) || h.seq != peer.recv_seq) {
    fail_peer(peer, str_cat("received a malformed point-to-point message from rank ", peer.rank,
                            " (", describe(h), ", expected message #", peer.recv_seq, ")"));
    return;
  }
  auto it = std::find_if(peer.recvs.begin(), peer.recvs.end(),
                         [&](const auto& op) { return op->tag == h.arg; });
  if (it == peer.recvs.end()) {
    peer.in = Peer::In::kParked;
    return;
  }
  std::unique_ptr<Op> op = std::move(*it);
  peer.recvs.erase(it);
  ++peer.recv_seq;
  peer.in = Peer::In::kPayload;
  peer.payload_bytes = h.count * element_size(h.dtype);
  peer.payload_done = 0;
  if (op->count != h.count || op->dtype != h.dtype) {
    refuse(peer, *op, h);
    peer.target = Peer::Target::kDiscard;
    return;
  }
  peer.target = Peer::Target::kRecv;
  peer.payload = op->data;
  peer.receiving = std::move(op);
}

// A recv for another tag needs the bytes behind the parked message: read the
// parked one into memory of its own.
void P2PEngine::spill_parked(Peer& peer) {
  Unexpected u;
  u.header = peer.header;
  u.data.resize(peer.header.count * element_size(peer.header.dtype));
  peer.unexpected.push_back(std::move(u));
  ++peer.recv_seq;
  peer.in = Peer::In::kPayload;
  peer.target = Peer::Target::kUnexpected;
  peer.payload = peer.unexpected.back().data.data();
  peer.payload_bytes = peer.unexpected.back().data.size();
  peer.payload_done = 0;
}

void P2PEngine::on_payload_done(Peer& peer) {
  if (peer.target == Peer::Target::kRecv) {
    finish(peer.receiving->work);
    peer.receiving.reset();
  } else if (peer.target == Peer::Target::kUnexpected) {
    peer.unexpected.back().complete = true;
  } else if (peer.target == Peer::Target::kRefusal) {
    on_refusal(peer);
  }
  peer.in = Peer::In::kHeader;
  peer.target = Peer::Target::kDiscard;
  deliver_unexpected(peer);
}

// Hands every complete message that a recv has claimed to that recv.
void P2PEngine::deliver_unexpected(Peer& peer) {
  for (auto it = peer.unexpected.begin(); it != peer.unexpected.end();) {
    if (!it->complete || !it->claimant) {
      ++it;
      continue;
    }
    Op& op = *it->claimant;
    const Header& h = it->header;
    if (op.count != h.count || op.dtype != h.dtype) {
      refuse(peer, op, h);
    } else {
      std::memcpy(op.data, it->data.data(), it->data.size());
      finish(op.work);
    }
    it = peer.unexpected.erase(it);
  }
}

}  // namespace spmd::dist::tcp
