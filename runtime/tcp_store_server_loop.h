// The TCPStore server's loop, seen by its two source files:
// tcp_store_server.cpp (set-up, the poll loop and its I/O) and
// tcp_store_server_requests.cpp (what each request does to the table).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/kv_table.h"
#include "runtime/store_wire.h"
#include "runtime/tcp_store_server.h"

namespace spmd {

class TCPStoreServer::Loop {
 public:
  explicit Loop(net::Socket listener);
  ~Loop();
  void run();
  // Ends run() once no client is connected or `linger` has passed; the
  // clients still connected then are named in a warning.
  void stop(std::chrono::milliseconds linger);

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
    store_wire::Op wait_op = store_wire::Op::kWait;
    std::vector<std::string> wait_keys;
    net::Clock::time_point wait_deadline;
    int64_t wait_timeout_ms = 0;
  };

  void accept_all();
  void read_from(Conn& c);
  void write_to(Conn& c);
  bool handle_frames(Conn& c);
  void handle_hello(Conn& c, store_wire::Reader& r);
  void handle_request(Conn& c, store_wire::Reader& r);
  void handle_write(Conn& c, store_wire::Op op, store_wire::Reader& r);
  void handle_query(Conn& c, store_wire::Op op, store_wire::Reader& r);
  void start_wait(Conn& c, store_wire::Op op, std::vector<std::string> keys, int64_t timeout_ms);
  void answer_wait(Conn& c);
  void wake_waiters();
  void expire_waiters();
  int poll_timeout() const;
  void reply(Conn& c, store_wire::Writer& w);
  void drop(Conn& c, const std::string& reason);
  void say_abandoned() const;

  net::Socket listener_;
  net::Socket wake_read_, wake_write_;
  std::atomic<bool> stopping_{false};
  std::atomic<net::Clock::time_point> stop_deadline_{net::Clock::time_point::max()};
  std::atomic<int64_t> linger_ms_{0};  // stop()'s, for the warning
  KeyValueTable table_;
  std::vector<std::unique_ptr<Conn>> conns_;
  // Out of descriptors: the listener is not polled before accept_resume_.
  // The condition is said once, and its end once; a new shortage within a
  // minute of the last one said is not said again.
  net::Clock::time_point accept_resume_ = net::Clock::time_point::min();
  net::Clock::time_point out_of_fds_quiet_until_ = net::Clock::time_point::min();
  bool out_of_fds_said_ = false;
};

}  // namespace spmd
