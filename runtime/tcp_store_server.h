// TCPStoreServer: the server half of TCPStore. One thread runs a poll() loop
// over the listening socket and every client connection; it owns the table,
// so requests are applied one at a time in arrival order and need no lock.
// A get or wait whose keys are missing parks its connection until a write
// provides them or its timeout (carried in the request) passes.
//
// A client that sends something malformed (a bad greeting, an unknown
// operation, a truncated or oversized frame) loses its connection, and only
// its own: the server and the other clients carry on.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "runtime/socket.h"

namespace spmd {

class TCPStoreServer {
 public:
  // Listens on host:port (empty host: every interface; port 0: a free port)
  // and starts serving. Throws CommError when the port cannot be bound.
  explicit TCPStoreServer(uint16_t port, const std::string& host = "");
  // Serves on an already bound, listening socket, taking ownership of it.
  // This is how a launcher avoids the race between choosing a free port and
  // binding it: it binds first, then hands the socket over.
  explicit TCPStoreServer(net::Socket listener);
  // Keeps serving until every client has disconnected or `linger` has
  // passed, then stops the thread and closes every connection (a warning
  // names the clients still connected). Call at most once; the destructor
  // stops at once when it was not called.
  void shutdown(std::chrono::milliseconds linger);
  ~TCPStoreServer();

  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  uint16_t port() const { return port_; }

 private:
  class Loop;  // the poll loop and its state, in the .cpp

  uint16_t port_ = 0;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace spmd
