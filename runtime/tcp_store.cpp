// TCPStore client: each call encodes one request (runtime/store_wire.h), sends
// it on a pooled connection and decodes the response. Blocking calls carry
// their timeout to the server, which parks them and answers kTimeout with the
// missing keys; the client waits a little longer than that for the answer, so
// a server that vanished is also noticed.
#include "runtime/tcp_store.h"

#include <exception>

#include "runtime/kv_table.h"
#include "runtime/logging.h"
#include "runtime/store_wire.h"
#include "runtime/tcp_store_server.h"

namespace spmd {

using namespace store_wire;

namespace {
// How much longer than a blocking call's own timeout the client waits for the
// server's answer before it gives up on the server itself.
constexpr auto kServerGrace = std::chrono::seconds(5);

std::string key_what(const char* op, const std::string& key) {
  return str_cat(op, "('", key, "')");
}
}  // namespace

// ---- one connection: greeting and round trips ----

class TCPStore::Connection {
 public:
  Connection(const std::string& host, uint16_t port, const std::string& source, Duration timeout)
      : sock_(net::connect_tcp(host, port, timeout, source)) {
    net::Deadline deadline = net::Clock::now() + timeout;
    std::vector<uint8_t> body = round_trip(Writer().u32(kMagic).u16(kVersion).finish(), deadline);
    Reader r(body.data(), body.size());
    if (static_cast<Status>(r.u8()) != Status::kOk)
      SPMD_THROW(CommError, "the server refused the connection: ", r.str());
  }

  std::vector<uint8_t> round_trip(const std::vector<uint8_t>& frame, net::Deadline deadline) {
    net::send_all(sock_.fd(), frame.data(), frame.size(), deadline);
    uint8_t len_bytes[4];
    net::recv_all(sock_.fd(), len_bytes, 4, deadline);
    uint32_t len = load_u32(len_bytes);
    if (len == 0 || len > kMaxFrameBytes)
      SPMD_THROW(CommError, "the server sent a frame of ", len, " bytes; is it a store server?");
    std::vector<uint8_t> body(len);
    net::recv_all(sock_.fd(), body.data(), len, deadline);
    return body;
  }

  int fd() const { return sock_.fd(); }

 private:
  net::Socket sock_;
};

// ---- set-up ----

TCPStore::TCPStore(TCPStoreOptions options) : Store(options.timeout), options_(std::move(options)) {
  if (options_.is_server) {
    server_ = options_.listen_fd >= 0
                  ? std::make_unique<TCPStoreServer>(net::Socket(options_.listen_fd))
                  : std::make_unique<TCPStoreServer>(options_.port, options_.listen_host);
    options_.port = server_->port();
    options_.listen_fd = -1;
  }
  // The first connection proves the server is there; keep it for later calls.
  release(acquire("connect"));
  SPMD_LOG_DEBUG("TCPStore: connected to ", options_.host, ":", options_.port,
                 options_.source.empty() ? "" : " from " + options_.source,
                 server_ ? " (hosting the server)" : "");
}

TCPStore::~TCPStore() {
  idle_.clear();  // our own connections first: the server counts the others
  if (!server_) return;
  auto linger = std::uncaught_exceptions() > 0 ? Duration(0) : options_.linger;
  SPMD_LOG_DEBUG("TCPStore: serving until the other clients disconnect (at most ", linger.count(),
                 " ms)");
  server_->shutdown(linger);
}

std::string TCPStore::local_address() {
  std::unique_ptr<Connection> conn = acquire("local_address");
  std::string ip = net::local_ip(conn->fd());
  release(std::move(conn));
  return ip;
}

// ---- the pool ----

std::unique_ptr<TCPStore::Connection> TCPStore::acquire(const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (!idle_.empty()) {
      std::unique_ptr<Connection> conn = std::move(idle_.back());
      idle_.pop_back();
      return conn;
    }
  }
  try {
    return std::make_unique<Connection>(options_.host, options_.port, options_.source, timeout());
  } catch (const TimeoutError& e) {
    SPMD_THROW(TimeoutError, "TCPStore ", what, ": ", e.what());
  } catch (const CommError& e) {
    SPMD_THROW(CommError, "TCPStore ", what, " to ", options_.host, ":", options_.port, ": ",
               e.what());
  }
}

void TCPStore::release(std::unique_ptr<Connection> conn) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  idle_.push_back(std::move(conn));
}

std::vector<uint8_t> TCPStore::call(const std::vector<uint8_t>& frame, net::Deadline deadline,
                                    const std::string& what) {
  std::unique_ptr<Connection> conn = acquire(what);
  // A connection that failed mid-request is in an unknown state: it is not
  // returned to the pool (its destructor closes it).
  try {
    std::vector<uint8_t> body = conn->round_trip(frame, deadline);
    release(std::move(conn));
    return body;
  } catch (const TimeoutError& e) {
    SPMD_THROW(TimeoutError, "TCPStore ", what, " on ", options_.host, ":", options_.port,
               ": the server did not answer (", e.what(), ")");
  } catch (const CommError& e) {
    SPMD_THROW(CommError, "TCPStore ", what, " on ", options_.host, ":", options_.port,
               ": lost the connection to the server (", e.what(), ")");
  }
}

void TCPStore::check_status(const std::vector<uint8_t>& body, const std::string& what,
                            Duration timeout) {
  Reader r(body.data(), body.size());
  auto status = static_cast<Status>(r.u8());
  if (status == Status::kTimeout)
    SPMD_THROW(TimeoutError, "TCPStore ", what, ": timed out after ", timeout.count(),
               " ms waiting for key ", quote_keys(r.keys()), " (server ", options_.host, ":",
               options_.port, ")");
  if (status == Status::kError) SPMD_THROW(InvalidArgument, r.str());
  if (status != Status::kOk)
    SPMD_THROW(CommError, "TCPStore ", what, ": unknown status ", static_cast<int>(status));
}

// ---- the operations ----

void TCPStore::set(const std::string& key, const Bytes& value) {
  std::string what = key_what("set", key);
  auto frame = Writer().u8(static_cast<uint8_t>(Op::kSet)).str(key).bytes(value).finish();
  check_status(call(frame, net::Clock::now() + timeout(), what), what, timeout());
}

Bytes TCPStore::get(const std::string& key, Duration timeout) {
  std::string what = key_what("get", key);
  auto frame = Writer().u8(static_cast<uint8_t>(Op::kGet)).str(key).i64(timeout.count()).finish();
  std::vector<uint8_t> body = call(frame, net::Clock::now() + timeout + kServerGrace, what);
  check_status(body, what, timeout);
  Reader r(body.data() + 1, body.size() - 1);
  return r.bytes();
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  std::string what = key_what("add", key);
  auto frame = Writer().u8(static_cast<uint8_t>(Op::kAdd)).str(key).i64(delta).finish();
  std::vector<uint8_t> body = call(frame, net::Clock::now() + timeout(), what);
  check_status(body, what, timeout());
  Reader r(body.data() + 1, body.size() - 1);
  return r.i64();
}

Bytes TCPStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  std::string what = key_what("compare_set", key);
  auto frame = Writer()
                   .u8(static_cast<uint8_t>(Op::kCompareSet))
                   .str(key)
                   .bytes(expected)
                   .bytes(desired)
                   .finish();
  std::vector<uint8_t> body = call(frame, net::Clock::now() + timeout(), what);
  check_status(body, what, timeout());
  Reader r(body.data() + 1, body.size() - 1);
  return r.bytes();
}

void TCPStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::string what = str_cat("wait(", quote_keys(keys), ")");
  auto frame =
      Writer().u8(static_cast<uint8_t>(Op::kWait)).keys(keys).i64(timeout.count()).finish();
  check_status(call(frame, net::Clock::now() + timeout + kServerGrace, what), what, timeout);
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  std::string what = str_cat("check(", quote_keys(keys), ")");
  auto frame = Writer().u8(static_cast<uint8_t>(Op::kCheck)).keys(keys).finish();
  std::vector<uint8_t> body = call(frame, net::Clock::now() + timeout(), what);
  check_status(body, what, timeout());
  return body.size() > 1 && body[1] != 0;
}

bool TCPStore::delete_key(const std::string& key) {
  std::string what = key_what("delete_key", key);
  auto frame = Writer().u8(static_cast<uint8_t>(Op::kDeleteKey)).str(key).finish();
  std::vector<uint8_t> body = call(frame, net::Clock::now() + timeout(), what);
  check_status(body, what, timeout());
  return body.size() > 1 && body[1] != 0;
}

int64_t TCPStore::num_keys() {
  auto frame = Writer().u8(static_cast<uint8_t>(Op::kNumKeys)).finish();
  std::vector<uint8_t> body = call(frame, net::Clock::now() + timeout(), "num_keys");
  check_status(body, "num_keys", timeout());
  Reader r(body.data() + 1, body.size() - 1);
  return r.i64();
}

}  // namespace spmd
