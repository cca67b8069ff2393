// The TCPStore server loop. Each turn of run():
//   1. poll() the wake pipe, the listener and every connection, sleeping at
//      most until the earliest deadline of a parked get/wait;
//   2. accept new clients, read what arrived, write what is pending (out of
//      file descriptors, the listener rests kAcceptBackoff, said once, while
//      the clients already connected are served);
//   3. answer parked requests whose deadline passed with kTimeout;
//   4. handle complete frames until no connection can make progress. A
//      write (set/add/compare_set) answers every parked request whose keys
//      now all exist.
// A connection handles one request at a time: while its request is parked,
// any frames it pipelined wait in its input buffer.

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "runtime/logging.h"
#include "runtime/tcp_store_server_loop.h"

namespace spmd {

using namespace store_wire;
using Clock = net::Clock;

namespace {
// Stop reading from a client whose replies pile up unread; drop it past the cap.
constexpr size_t kOutputHighWater = 1u << 20;
constexpr size_t kOutputCap = 4 * static_cast<size_t>(kMaxFrameBytes);
// How long the listener rests when accept() finds no descriptor left.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(200);
}  // namespace

// ---- set-up and the loop ----

TCPStoreServer::Loop::Loop(net::Socket listener) : listener_(std::move(listener)) {
  int fds[2];
  SPMD_CHECK(::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0, "TCPStoreServer: pipe failed");
  wake_read_ = net::Socket(fds[0]);
  wake_write_ = net::Socket(fds[1]);
  net::set_nonblocking(listener_.fd(), true);
  net::set_cloexec(listener_.fd());
}

TCPStoreServer::Loop::~Loop() = default;

void TCPStoreServer::Loop::stop(std::chrono::milliseconds linger) {
  linger_ms_.store(linger.count());
  stop_deadline_.store(Clock::now() + linger);
  stopping_.store(true);
  char b = 1;
  (void)!::write(wake_write_.fd(), &b, 1);
}

void TCPStoreServer::Loop::run() {
  std::vector<pollfd> fds;
  for (;;) {
    if (stopping_.load() && conns_.empty()) return;
    if (stopping_.load() && Clock::now() >= stop_deadline_.load()) {
      if (linger_ms_.load() > 0) say_abandoned();  // linger 0: the owner gave up on them
      return;
    }
    const short listen_ev = Clock::now() >= accept_resume_ ? POLLIN : 0;
    fds.assign({{wake_read_.fd(), POLLIN, 0}, {listener_.fd(), listen_ev, 0}});
    for (auto& c : conns_) {
      short ev = c->out.empty() ? 0 : POLLOUT;
      if (!c->closing && c->out.size() < kOutputHighWater) ev |= POLLIN;
      fds.push_back({c->sock.fd(), ev, 0});
    }
    int n = ::poll(fds.data(), fds.size(), poll_timeout());
    if (n < 0 && errno != EINTR) SPMD_LOG_ERROR("TCPStoreServer: poll: ", std::strerror(errno));
    if (fds[0].revents) {
      char buf[64];
      while (::read(wake_read_.fd(), buf, sizeof buf) > 0) {
      }
    }
    // Connections accepted below have no pollfd yet: walk only the polled ones.
    size_t polled = conns_.size();
    if (fds[1].revents & POLLIN) accept_all();
    for (size_t i = 0; i < polled; ++i) {
      Conn& c = *conns_[i];
      short re = fds[i + 2].revents;
      if (re & (POLLIN | POLLHUP | POLLERR)) read_from(c);
      if (!c.closed && (re & POLLOUT)) write_to(c);
    }
    expire_waiters();
    for (bool progress = true; progress;) {
      progress = false;
      for (auto& c : conns_) progress |= handle_frames(*c);
    }
    for (auto& c : conns_)
      if (!c->closed && !c->out.empty()) write_to(*c);
    std::erase_if(conns_, [](const auto& c) { return c->closed; });
  }
}

// ---- I/O ----

void TCPStoreServer::Loop::accept_all() {
  for (;;) {
    int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
      // The pending client stays in the backlog; polling the listener now
      // would report it again at once and spin a core.
      const int err = errno;
      accept_resume_ = Clock::now() + kAcceptBackoff;
      if (!out_of_fds_said_ && Clock::now() >= out_of_fds_quiet_until_) {
        SPMD_LOG_WARN("TCPStoreServer: cannot accept a client (", std::strerror(err), ", ",
                      conns_.size(), " connected): new clients wait, retrying every ",
                      kAcceptBackoff.count(), " ms; raise `ulimit -n`");
        out_of_fds_said_ = true;
        out_of_fds_quiet_until_ = Clock::now() + std::chrono::minutes(1);
      }
      return;
    }
    if (fd < 0) return;  // EAGAIN: no more; other errors: retry next turn
    if (out_of_fds_said_) SPMD_LOG_WARN("TCPStoreServer: accepting clients again");
    out_of_fds_said_ = false;
    auto c = std::make_unique<Conn>();
    c->sock = net::Socket(fd);
    c->peer = net::peer_name(fd);
    SPMD_LOG_DEBUG("TCPStoreServer: client ", c->peer, " connected");
    conns_.push_back(std::move(c));
  }
}

void TCPStoreServer::Loop::read_from(Conn& c) {
  uint8_t buf[64 * 1024];
  for (;;) {
    ssize_t k = ::recv(c.sock.fd(), buf, sizeof buf, 0);
    if (k > 0) {
      c.in.insert(c.in.end(), buf, buf + k);
      if (c.in.size() > 2 * static_cast<size_t>(kMaxFrameBytes))
        return drop(c, "it sent more than two frames' worth of bytes ahead");
      if (static_cast<size_t>(k) < sizeof buf) return;
    } else if (k == 0) {
      SPMD_LOG_DEBUG("TCPStoreServer: client ", c.peer, " disconnected");
      c.closed = true;  // a parked request of a client that left is simply dropped
      return;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return;
    } else if (errno != EINTR) {
      return drop(c, std::strerror(errno));
    }
  }
}

void TCPStoreServer::Loop::write_to(Conn& c) {
  while (!c.out.empty()) {
    ssize_t k = ::send(c.sock.fd(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      c.out.erase(c.out.begin(), c.out.begin() + k);
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else if (k < 0 && errno != EINTR) {
      c.closed = true;
      return;
    }
  }
  if (c.closing) c.closed = true;
}

void TCPStoreServer::Loop::reply(Conn& c, Writer& w) {
  std::vector<uint8_t> frame = w.finish();
  c.out.insert(c.out.end(), frame.begin(), frame.end());
  if (c.out.size() > kOutputCap) drop(c, "it does not read its replies");
}

void TCPStoreServer::Loop::drop(Conn& c, const std::string& reason) {
  SPMD_LOG_WARN("TCPStoreServer: closing the connection from ", c.peer, ": ", reason);
  c.closed = true;
}

// The server stops with clients still connected: their connections close
// with it, and a client that was still to ask something finds no store.
void TCPStoreServer::Loop::say_abandoned() const {
  std::string peers;
  for (size_t i = 0; i < conns_.size() && i < 4; ++i)
    peers += str_cat(i ? ", " : "", conns_[i]->peer, conns_[i]->waiting ? " (waiting)" : "");
  if (conns_.size() > 4) peers += str_cat(", and ", conns_.size() - 4, " more");
  SPMD_LOG_WARN("TCPStoreServer: ", conns_.size(), conns_.size() == 1 ? " client" : " clients",
                " still connected ", linger_ms_.load(), " ms after the store began to stop (",
                peers, "); closing ", conns_.size() == 1 ? "its connection" : "their connections");
}

// ---- the public face ----

TCPStoreServer::TCPStoreServer(uint16_t port, const std::string& host)
    : TCPStoreServer(net::listen_tcp(host, port)) {}

TCPStoreServer::TCPStoreServer(net::Socket listener) {
  SPMD_CHECK(listener.valid(), "TCPStoreServer: the listening socket is not open");
  port_ = net::local_port(listener.fd());
  loop_ = std::make_unique<Loop>(std::move(listener));
  thread_ = std::thread([this] {
    try {
      loop_->run();
    } catch (const std::exception& e) {
      SPMD_LOG_ERROR("TCPStoreServer on port ", port_, " stopped: ", e.what());
    }
  });
  SPMD_LOG_DEBUG("TCPStoreServer: serving on port ", port_);
}

void TCPStoreServer::shutdown(std::chrono::milliseconds linger) {
  if (!thread_.joinable()) return;
  loop_->stop(linger);
  thread_.join();
}

TCPStoreServer::~TCPStoreServer() { shutdown(std::chrono::milliseconds(0)); }

}  // namespace spmd
