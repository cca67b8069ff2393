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
#include "runtime/tcp_store_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "runtime/kv_table.h"
#include "runtime/logging.h"
#include "runtime/store_wire.h"

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

class TCPStoreServer::Loop {
 public:
  explicit Loop(net::Socket listener);
  ~Loop();
  void run();
  // Ends run() once no client is connected or the deadline has passed.
  void stop(Clock::time_point deadline);

 private:
  struct Conn {
    net::Socket sock;
    std::string peer;
    std::vector<uint8_t> in, out;
    bool greeted = false;
    bool closing = false;  // close once `out` is flushed
    bool closed = false;
    // The parked request, when `waiting`.
    bool waiting = false;
    Op wait_op = Op::kWait;
    std::vector<std::string> wait_keys;
    Clock::time_point wait_deadline;
    int64_t wait_timeout_ms = 0;
  };

  void accept_all();
  void read_from(Conn& c);
  void write_to(Conn& c);
  bool handle_frames(Conn& c);
  void handle_hello(Conn& c, Reader& r);
  void handle_request(Conn& c, Reader& r);
  void handle_write(Conn& c, Op op, Reader& r);
  void handle_query(Conn& c, Op op, Reader& r);
  void start_wait(Conn& c, Op op, std::vector<std::string> keys, int64_t timeout_ms);
  void answer_wait(Conn& c);
  void wake_waiters();
  void expire_waiters();
  int poll_timeout() const;
  void reply(Conn& c, Writer& w);
  void drop(Conn& c, const std::string& reason);

  net::Socket listener_;
  net::Socket wake_read_, wake_write_;
  std::atomic<bool> stopping_{false};
  std::atomic<Clock::time_point> stop_deadline_{Clock::time_point::max()};
  KeyValueTable table_;
  std::vector<std::unique_ptr<Conn>> conns_;
  // Out of descriptors: the listener is not polled before accept_resume_.
  // The condition is said once, and its end once; a new shortage within a
  // minute of the last one said is not said again.
  Clock::time_point accept_resume_ = Clock::time_point::min();
  Clock::time_point out_of_fds_quiet_until_ = Clock::time_point::min();
  bool out_of_fds_said_ = false;
};

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

void TCPStoreServer::Loop::stop(Clock::time_point deadline) {
  stop_deadline_.store(deadline);
  stopping_.store(true);
  char b = 1;
  (void)!::write(wake_write_.fd(), &b, 1);
}

void TCPStoreServer::Loop::run() {
  std::vector<pollfd> fds;
  for (;;) {
    if (stopping_.load() && (conns_.empty() || Clock::now() >= stop_deadline_.load())) return;
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

// ---- requests ----

// Handles every complete frame in c.in until the connection parks a request.
// Returns whether it handled any.
bool TCPStoreServer::Loop::handle_frames(Conn& c) {
  bool handled = false;
  size_t pos = 0;
  try {
    while (!c.closed && !c.closing && !c.waiting && c.in.size() - pos >= 4) {
      uint32_t len = load_u32(c.in.data() + pos);
      if (len > kMaxFrameBytes)
        throw ProtocolError(
            str_cat("a frame of ", len, " bytes exceeds the limit of ", kMaxFrameBytes));
      if (c.in.size() - pos - 4 < len) break;
      Reader r(c.in.data() + pos + 4, len);
      pos += 4 + len;
      c.greeted ? handle_request(c, r) : handle_hello(c, r);
      handled = true;
    }
  } catch (const std::exception& e) {
    drop(c, e.what());
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<long>(std::min(pos, c.in.size())));
  return handled;
}

void TCPStoreServer::Loop::handle_hello(Conn& c, Reader& r) {
  uint32_t magic = r.u32();
  if (magic != kMagic) throw ProtocolError(str_cat("not a store client (bad greeting)"));
  uint16_t version = r.u16();
  r.expect_end();
  Writer w;
  if (version != kVersion) {
    w.u8(static_cast<uint8_t>(Status::kError))
        .str(str_cat("the store server speaks protocol version ", kVersion, ", the client ",
                     version));
    c.closing = true;
    SPMD_LOG_WARN("TCPStoreServer: refusing ", c.peer, ": protocol version ", version);
  } else {
    w.u8(static_cast<uint8_t>(Status::kOk)).u16(kVersion);
    c.greeted = true;
  }
  reply(c, w);
}

void TCPStoreServer::Loop::handle_request(Conn& c, Reader& r) {
  auto op = static_cast<Op>(r.u8());
  switch (op) {
    case Op::kGet: {
      std::string key = r.str();
      int64_t timeout_ms = r.i64();
      r.expect_end();
      return start_wait(c, op, {key}, timeout_ms);
    }
    case Op::kWait: {
      std::vector<std::string> keys = r.keys();
      int64_t timeout_ms = r.i64();
      r.expect_end();
      return start_wait(c, op, std::move(keys), timeout_ms);
    }
    case Op::kSet:
    case Op::kAdd:
    case Op::kCompareSet:
      return handle_write(c, op, r);
    case Op::kCheck:
    case Op::kDeleteKey:
    case Op::kNumKeys:
      return handle_query(c, op, r);
  }
  throw ProtocolError(str_cat("unknown operation ", static_cast<int>(op)));
}

// set, add, compare_set: change the table, answer, wake the parked requests.
void TCPStoreServer::Loop::handle_write(Conn& c, Op op, Reader& r) {
  Writer w;
  std::string key = r.str();
  if (op == Op::kSet) {
    Bytes value = r.bytes();
    r.expect_end();
    table_.set(key, value);
    w.u8(static_cast<uint8_t>(Status::kOk));
  } else if (op == Op::kAdd) {
    int64_t delta = r.i64();
    r.expect_end();
    try {
      int64_t value = table_.add(key, delta);
      w.u8(static_cast<uint8_t>(Status::kOk)).i64(value);
    } catch (const InvalidArgument& e) {  // a well-formed request the table refuses
      w.u8(static_cast<uint8_t>(Status::kError)).str(e.what());
    }
  } else {
    Bytes expected = r.bytes(), desired = r.bytes();
    r.expect_end();
    w.u8(static_cast<uint8_t>(Status::kOk)).bytes(table_.compare_set(key, expected, desired));
  }
  reply(c, w);
  wake_waiters();
}

// check, delete_key, num_keys: answer at once.
void TCPStoreServer::Loop::handle_query(Conn& c, Op op, Reader& r) {
  Writer w;
  w.u8(static_cast<uint8_t>(Status::kOk));
  if (op == Op::kCheck) {
    std::vector<std::string> keys = r.keys();
    r.expect_end();
    w.u8(table_.missing(keys).empty() ? 1 : 0);
  } else if (op == Op::kDeleteKey) {
    std::string key = r.str();
    r.expect_end();
    w.u8(table_.erase(key) ? 1 : 0);
  } else {
    r.expect_end();
    w.i64(table_.size());
  }
  reply(c, w);
}

void TCPStoreServer::Loop::start_wait(Conn& c, Op op, std::vector<std::string> keys,
                                      int64_t timeout_ms) {
  if (timeout_ms < 0) throw ProtocolError(str_cat("negative timeout ", timeout_ms));
  c.wait_op = op;
  c.wait_keys = std::move(keys);
  c.wait_timeout_ms = timeout_ms;
  c.wait_deadline =
      Clock::now() + std::chrono::milliseconds(std::min<int64_t>(timeout_ms, int64_t{1} << 40));
  c.waiting = true;
  if (table_.missing(c.wait_keys).empty()) answer_wait(c);
}

void TCPStoreServer::Loop::answer_wait(Conn& c) {
  Writer w;
  w.u8(static_cast<uint8_t>(Status::kOk));
  if (c.wait_op == Op::kGet) w.bytes(*table_.find(c.wait_keys[0]));
  c.waiting = false;
  c.wait_keys.clear();
  reply(c, w);
}

void TCPStoreServer::Loop::wake_waiters() {
  for (auto& c : conns_)
    if (c->waiting && !c->closed && table_.missing(c->wait_keys).empty()) answer_wait(*c);
}

void TCPStoreServer::Loop::expire_waiters() {
  Clock::time_point now = Clock::now();
  for (auto& c : conns_) {
    if (!c->waiting || c->closed || c->wait_deadline > now) continue;
    Writer w;
    w.u8(static_cast<uint8_t>(Status::kTimeout)).keys(table_.missing(c->wait_keys));
    c->waiting = false;
    c->wait_keys.clear();
    reply(*c, w);
  }
}

int TCPStoreServer::Loop::poll_timeout() const {
  // No parked request and no stop pending: sleep until something happens.
  int ms = stopping_.load() ? net::poll_timeout_ms(stop_deadline_.load()) : -1;
  if (Clock::now() < accept_resume_) {  // the listener rests: wake to poll it again
    int left = net::poll_timeout_ms(accept_resume_);
    ms = ms < 0 ? left : std::min(ms, left);
  }
  for (const auto& c : conns_) {
    if (!c->waiting) continue;
    int left = net::poll_timeout_ms(c->wait_deadline);
    ms = ms < 0 ? left : std::min(ms, left);
  }
  return ms;
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
  loop_->stop(Clock::now() + linger);
  thread_.join();
}

TCPStoreServer::~TCPStoreServer() { shutdown(std::chrono::milliseconds(0)); }

}  // namespace spmd
