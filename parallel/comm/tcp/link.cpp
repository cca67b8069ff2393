// Link: non-blocking, batched channel I/O over queues of byte ranges.
//
// pump_send() gathers up to kBatch queued ranges into one write (over TCP one
// sendmsg); a short write means the socket buffer (or the ring) is full, so
// it stops there instead of paying for a call that would only say EAGAIN.
// pump_recv() scatters into up to kBatch posted destinations with one read,
// by the same rule.
#include "parallel/comm/tcp/link.h"

#include <poll.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>

namespace spmd::dist::tcp {
namespace {
constexpr size_t kBatch = 64;  // ranges per syscall (well under IOV_MAX)
}  // namespace

Link::Link(int peer, int fd) : Link(peer, std::make_unique<SocketChannel>(fd)) {}

Link::Link(int peer, std::unique_ptr<Channel> channel)
    : peer_(peer), channel_(std::move(channel)) {}

void Link::begin(const Header& to_send, const Header& to_expect) {
  send_header_ = to_send;
  expect_header_ = to_expect;
  header_queued_ = header_posted_ = heard_ = false;
  bytes_in_ = bytes_out_ = 0;
  in_collective_ = true;
}

void Link::end() {
  SPMD_CHECK(idle(), "Link::end: rank ", peer_, "'s link still has I/O queued");
  in_collective_ = false;
}

Link::Ticket Link::send(const void* data, size_t n) {
  if (in_collective_ && !header_queued_) {
    out_.push_back({reinterpret_cast<char*>(&send_header_), sizeof(Header), true});
    ++sends_posted_;
    header_queued_ = true;
  }
  out_.push_back({static_cast<char*>(const_cast<void*>(data)), n, false});
  return sends_posted_++;
}

Link::Ticket Link::recv(void* dst, size_t n) {
  if (in_collective_ && !header_posted_) {
    in_.push_back({reinterpret_cast<char*>(&got_header_), sizeof(Header), true});
    ++recvs_posted_;
    header_posted_ = true;
  }
  in_.push_back({static_cast<char*>(dst), n, false});
  return recvs_posted_++;
}

short Link::wanted_events() const {
  return short((out_.empty() ? 0 : POLLOUT) | (in_.empty() ? 0 : POLLIN));
}

short Link::prepare_wait() {
  // An empty range at the front of either queue completes without the
  // peer (the next pump retires it): nothing to sleep for.
  if ((!out_.empty() && out_.front().left == 0) || (!in_.empty() && in_.front().left == 0)) {
    return 0;
  }
  const short want = wanted_events();
  return want ? channel_->prepare_wait(want) : 0;
}

void Link::on_ready(short revents) {
  if (channel_->wakes_both()) {
    channel_->on_wakeup();
    pump();
    return;
  }
  if (revents & (POLLOUT | POLLERR | POLLHUP)) pump_send();
  if (revents & (POLLIN | POLLERR | POLLHUP)) pump_recv();
}

bool Link::pump() {
  const bool sent_any = pump_send();
  const bool received_any = pump_recv();
  return sent_any || received_any;
}

bool Link::pump_send() {
  bool moved = false;
  while (!out_.empty()) {
    iovec iov[kBatch];
    size_t k = 0, want = 0;
    for (auto it = out_.begin(); it != out_.end() && k < kBatch; ++it) {
      if (it->left == 0) continue;
      iov[k++] = {it->data, it->left};
      want += it->left;
    }
    if (want == 0) {
      retire_sends(0);  // only empty ranges were queued: they complete at once
      return true;
    }
    const ssize_t r = channel_->write(iov, k);
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
      if (errno == EINTR) continue;
      fail_io("send to", errno);
    }
    retire_sends(size_t(r));
    bytes_out_ += size_t(r);
    moved = true;
    if (size_t(r) < want) return true;  // the socket buffer is full
  }
  return moved;
}

bool Link::pump_recv() {
  bool moved = false;
  while (!in_.empty()) {
    iovec iov[kBatch];
    size_t k = 0, want = 0;
    for (auto it = in_.begin(); it != in_.end() && k < kBatch; ++it) {
      if (it->left == 0) continue;
      iov[k++] = {it->data, it->left};
      want += it->left;
    }
    if (want == 0) {
      retire_recvs(0);
      return true;
    }
    const ssize_t r = channel_->read(iov, k);
    if (r == 0) fail_io("receive from", 0);
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return moved;
      if (errno == EINTR) continue;
      fail_io("receive from", errno);
    }
    retire_recvs(size_t(r));
    bytes_in_ += size_t(r);
    moved = true;
    if (size_t(r) < want) return true;  // the socket is drained
  }
  return moved;
}

// Takes n written bytes off the front of the send queue, completing every
// range they finish (and any empty range behind them).
void Link::retire_sends(size_t n) {
  while (!out_.empty()) {
    Range& front = out_.front();
    const size_t take = std::min(n, front.left);
    front.data += take;
    front.left -= take;
    n -= take;
    if (front.left > 0) return;
    out_.pop_front();
    ++sends_done_;
  }
}

// The same for receives; a completed header is checked before anything
// behind it counts as received.
void Link::retire_recvs(size_t n) {
  while (!in_.empty()) {
    Range& front = in_.front();
    const size_t take = std::min(n, front.left);
    front.data += take;
    front.left -= take;
    n -= take;
    if (front.left > 0) return;
    const bool was_header = front.is_header;
    in_.pop_front();
    if (was_header) {
      if (auto why = mismatch(got_header_, expect_header_)) {
        throw LinkError(peer_, true, str_cat("header mismatch with rank ", peer_, ": ", *why));
      }
      heard_ = true;
    }
    ++recvs_done_;
  }
}

void Link::fail_io(const char* what, int err) const {
  const std::string cause = err == 0 ? "the peer closed the connection"
                                     : str_cat("the connection failed (", std::strerror(err), ")");
  throw LinkError(peer_, false,
                  str_cat("lost rank ", peer_, " (", what, " rank ", peer_, ": ", cause,
                          "; it exited, was killed, or aborted after an error of its own)"));
}

Link::Inflow Link::inflow() const {
  size_t left = 0;
  for (const Range& r : in_) left += r.left;
  return {bytes_in_, bytes_in_ + left};
}

std::string Link::pending() const {
  size_t in_left = 0, out_left = 0;
  for (const Range& r : in_) in_left += r.left;
  for (const Range& r : out_) out_left += r.left;
  std::string s;
  if (in_left)
    s +=
        str_cat(in_left, " bytes from rank ", peer_, " not yet received (", bytes_in_, " arrived)");
  if (out_left) {
    s += str_cat(s.empty() ? "" : ", ", out_left, " bytes to rank ", peer_,
                 " not yet sent (the peer is not reading)");
  }
  return s;
}

}  // namespace spmd::dist::tcp
