// The point-to-point engine: set-up and tear-down, posting, the send queues,
// deadlines and failures. Who drives the sockets (a waiting thread, or the
// engine's) is in p2p_drive.cpp; the receive side (matching by tag) in
// p2p_receive.cpp.
#include "parallel/comm/tcp/p2p.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>

#include "parallel/comm/tcp/p2p_state.h"
#include "runtime/error.h"

namespace spmd::dist::tcp {

std::string P2PEngine::describe_op(const Op& op) const {
  return str_cat(op.is_send ? "send to" : "recv from", " rank ", op.peer, " with tag ", op.tag,
                 " (", op.count, " ", dtype_name(op.dtype), ") in group ", group_);
}

P2PEngine::P2PEngine(std::string group_name, int rank,
                     std::vector<std::unique_ptr<Channel>> channels,
                     std::chrono::milliseconds timeout, SpinPolicy spin,
                     std::chrono::microseconds start_after)
    : group_(std::move(group_name)),
      rank_(rank),
      timeout_(timeout),
      spin_(spin),
      start_after_(start_after),
      timer_(/*nonblocking=*/true) {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  event_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  SPMD_CHECK(epoll_fd_ >= 0 && event_fd_ >= 0,
             "P2PEngine: cannot create epoll/eventfd: ", std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = uint32_t(-1);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, event_fd_, &ev);
  for (int r = 0; r < int(channels.size()); ++r) {
    auto peer = std::make_unique<Peer>();
    peer->rank = r;
    peer->channel = std::move(channels[r]);
    peer->fd = peer->channel ? peer->channel->fd() : -1;
    if (peer->fd >= 0) {
      ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      ev.data.u32 = uint32_t(r);
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, peer->fd, &ev);
    }
    peers_.push_back(std::move(peer));
  }
  thread_ = std::thread([this] { loop(); });
}

P2PEngine::~P2PEngine() {
  stop();
  peers_.clear();  // closes the channels
  ::close(event_fd_);
  ::close(epoll_fd_);
}

void P2PEngine::stop() {
  {
    Lock lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      for (auto& peer : peers_) {
        fail_peer(*peer, "the process group was destroyed");
        if (peer->channel) peer->channel->shutdown();  // wakes threads asleep on it
      }
    }
    flush_completions(lock);
  }
  wake_engine();
  if (thread_.joinable()) thread_.join();
}

void P2PEngine::abort(const std::string& why) {
  Lock lock(mu_);
  for (auto& peer : peers_) {
    fail_peer(*peer, why);
    if (peer->channel) peer->channel->shutdown();
  }
  flush_completions(lock);
}

// --- Posting (any thread) -------------------------------------------------------

void P2PEngine::send(const void* data, size_t count, DType dtype, int peer, int tag, Work work) {
  auto op = std::make_unique<Op>();
  op->is_send = true;
  op->peer = peer;
  op->tag = tag;
  op->data = static_cast<char*>(const_cast<void*>(data));
  op->count = count;
  op->bytes = count * element_size(dtype);
  op->dtype = dtype;
  op->work = std::move(work);
  post(std::move(op));
}

void P2PEngine::recv(void* dst, size_t count, DType dtype, int peer, int tag, Work work) {
  auto op = std::make_unique<Op>();
  op->peer = peer;
  op->tag = tag;
  op->data = static_cast<char*>(dst);
  op->count = count;
  op->bytes = count * element_size(dtype);
  op->dtype = dtype;
  op->work = std::move(work);
  post(std::move(op));
}

// Starts the operation on this thread (its I/O goes as far as the socket
// allows now), then lets the engine's thread know when to look at what is
// left, in case nobody waits on it.
void P2PEngine::post(std::unique_ptr<Op> op) {
  op->deadline = Clock::now() + timeout_;
  Lock lock(mu_);
  if (stopping_) {
    finish(op->work, std::make_exception_ptr(CommError(
                         str_cat(describe_op(*op), ": the process group was destroyed"))));
  } else {
    start(std::move(op));
    schedule_engine_locked();
  }
  flush_completions(lock);
}

void P2PEngine::start(std::unique_ptr<Op> op) {
  Peer& peer = *peers_[op->peer];
  if (!peer.dead.empty() && op->is_send) {
    finish(op->work,
           std::make_exception_ptr(CommError(str_cat(describe_op(*op), ": ", peer.dead))));
    return;
  }
  if (op->is_send) {
    op->header.op = OpType::kSend;
    op->header.dtype = op->dtype;
    op->header.group = group_hash(group_);
    op->header.arg = op->tag;
    op->header.seq = peer.send_seq++;
    op->header.count = op->count;
    peer.sends.push_back(std::move(op));
    write_some(peer);
  } else {
    post_recv(peer, std::move(op));
  }
}

// Writes queued frames (header + payload, one write each) until the channel
// is full.
void P2PEngine::write_some(Peer& peer) {
  while (!peer.sends.empty() && peer.dead.empty()) {
    Op& op = *peer.sends.front();
    iovec iov[2];
    int k = 0;
    if (op.done < sizeof(Header)) {
      iov[k++] = {reinterpret_cast<char*>(&op.header) + op.done, sizeof(Header) - op.done};
    }
    const size_t payload_done = op.done > sizeof(Header) ? op.done - sizeof(Header) : 0;
    if (op.bytes > payload_done) iov[k++] = {op.data + payload_done, op.bytes - payload_done};
    const ssize_t r = k ? peer.channel->write(iov, size_t(k)) : 0;
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        const std::string lost = str_cat("lost rank ", peer.rank, " (", std::strerror(errno), ")");
        read_some(peer);  // what it sent before it left: a refusal of this send explains it
        fail_peer(peer, lost);
      }
      return;
    }
    op.done += size_t(r);
    ++progress_;
    if (op.done < sizeof(Header) + op.bytes) return;  // the socket is full
    finish(op.work, op.refused.empty() ? nullptr
                                       : std::make_exception_ptr(InvalidArgument(
                                             str_cat(describe_op(op), ": ", op.refused))));
    peer.sends.pop_front();
  }
}

// --- Deadlines and failures ---------------------------------------------------------

void P2PEngine::expire(Clock::time_point now) {
  auto timeout = [&](Op& op) {
    finish(op.work,
           std::make_exception_ptr(TimeoutError(str_cat(
               describe_op(op), ": timed out after ", timeout_.count(), " ms (",
               op.is_send ? "the peer has not taken the message: is it receiving with this tag?"
                          : "no message with this tag arrived: is the peer sending it?",
               ")"))));
  };
  for (auto& peer_ptr : peers_) {
    Peer& peer = *peer_ptr;
    std::erase_if(peer.recvs,
                  [&](auto& op) { return op->deadline <= now && (timeout(*op), true); });
    if (peer.receiving && peer.receiving->deadline <= now) {
      timeout(*peer.receiving);
      peer.receiving.reset();
      peer.target = Peer::Target::kDiscard;  // the rest of the message is read and dropped
    }
    for (Unexpected& u : peer.unexpected) {
      if (u.claimant && u.claimant->deadline <= now) {
        timeout(*u.claimant);
        u.claimant.reset();
      }
    }
    if (!peer.sends.empty() && peer.sends.front()->done > 0 &&
        peer.sends.front()->deadline <= now) {
      timeout(*peer.sends.front());
      peer.sends.pop_front();
      fail_peer(peer, str_cat("a send to rank ", peer.rank,
                              " timed out half-written, so the connection is out of step"));
    }
    std::erase_if(peer.sends,
                  [&](auto& op) { return op->deadline <= now && (timeout(*op), true); });
  }
}

bool P2PEngine::has_pending() const {
  for (const auto& peer : peers_) {
    if (!peer->sends.empty() || !peer->recvs.empty() || peer->receiving) return true;
  }
  return false;
}

P2PEngine::Clock::time_point P2PEngine::next_deadline() const {
  auto earliest = Clock::time_point::max();
  for (const auto& peer : peers_) {
    for (const auto& op : peer->sends) earliest = std::min(earliest, op->deadline);
    for (const auto& op : peer->recvs) earliest = std::min(earliest, op->deadline);
    if (peer->receiving) earliest = std::min(earliest, peer->receiving->deadline);
    for (const auto& u : peer->unexpected) {
      if (u.claimant) earliest = std::min(earliest, u.claimant->deadline);
    }
  }
  return earliest;
}

// The connection to `peer` is unusable: fail everything that involves it.
void P2PEngine::fail_peer(Peer& peer, const std::string& why) {
  if (peer.dead.empty()) peer.dead = why;
  auto fail = [&](Op& op) {
    if (!op.refused.empty()) {  // the peer refused this send before the pair failed
      finish(op.work,
             std::make_exception_ptr(InvalidArgument(str_cat(describe_op(op), ": ", op.refused))));
      return;
    }
    finish(op.work, std::make_exception_ptr(CommError(str_cat(describe_op(op), ": ", peer.dead))));
  };
  for (auto& op : peer.sends) fail(*op);
  for (auto& op : peer.recvs) fail(*op);
  if (peer.receiving) fail(*peer.receiving);
  peer.sends.clear();
  peer.recvs.clear();
  peer.receiving.reset();
  // Messages that arrived whole before the connection ended stay deliverable
  // (a peer may send and leave before this rank posts the recvs).
  std::erase_if(peer.unexpected, [&](Unexpected& u) {
    if (u.complete) return false;
    if (u.claimant) fail(*u.claimant);
    return true;
  });
}

}  // namespace spmd::dist::tcp
