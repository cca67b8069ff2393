// TCPStore: the Store that lets processes on different machines find each
// other. One process hosts the server (runtime/tcp_store_server.h): rank 0,
// or the launcher's agent on node 0. Every process, the host included, is a
// client that speaks the protocol of docs/store-protocol.md over TCP.
//
//   TCPStore store({.host = "node0", .port = 29500, .is_server = rank == 0});
//   store.set("rank0/addr", my_address);
//   std::string peer = store.get_string("rank1/addr");  // waits for rank 1
//
// A client keeps a small pool of connections: a thread blocked in get() holds
// one, and another thread's set() takes another, so threads never wait behind
// each other's blocking calls (and cannot deadlock that way).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/socket.h"
#include "runtime/store.h"

namespace spmd {

class TCPStoreServer;

struct TCPStoreOptions {
  // The server's address, as the clients reach it.
  std::string host = "127.0.0.1";
  // The server's port. With is_server, 0 picks a free port (see port()).
  uint16_t port = 0;
  // Host the server in this process as well.
  bool is_server = false;
  // With is_server: the address the server listens on; empty: every interface.
  std::string listen_host;
  // With is_server: serve on this already bound, listening socket instead of
  // binding `port`; the store takes ownership of the descriptor.
  int listen_fd = -1;
  // When not empty, the local address every connection to the server leaves
  // from (bound before connecting): the address of the interface
  // SPMD_SOCKET_IFNAME names, so that store traffic takes that interface.
  std::string source;
  // How long to keep retrying the first connection, and the default timeout of
  // every blocking call.
  Store::Duration timeout = Store::kDefaultTimeout;
  // With is_server: how long the destructor keeps serving while other clients
  // are still connected, so that the rank which finishes first does not pull
  // the store from under the others (a peer's last request may still be on
  // its way). Not when the store is destroyed by an exception unwinding.
  Store::Duration linger = std::chrono::seconds(30);
};

// Thread-safe. Every call either finishes or throws by its deadline:
// TimeoutError (naming the key) when the server did not answer in time or a
// key never appeared; CommError when the connection to the server is lost.
class TCPStore : public Store {
 public:
  // Starts the server when asked, then connects, retrying until the timeout
  // (the server may start after its clients). Throws TimeoutError naming the
  // address (and the source) when no server answers, CommError when the port
  // is in use, InvalidArgument when the source is not an address of this
  // machine.
  explicit TCPStore(TCPStoreOptions options);
  ~TCPStore() override;

  using Store::get;
  using Store::set;
  using Store::wait;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Duration timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  const std::string& host() const { return options_.host; }
  // The server's port (the one picked, when asked for port 0).
  uint16_t port() const { return options_.port; }
  bool is_server() const { return server_ != nullptr; }
  // This process's IP address on the interface through which it reaches the
  // server: the address peers on other machines can usually reach it at.
  std::string local_address();

 private:
  class Connection;
  // Sends one request frame and returns the response body (status first).
  // `what` names the call for error messages: "get('rank0/addr')".
  std::vector<uint8_t> call(const std::vector<uint8_t>& frame, net::Deadline deadline,
                            const std::string& what);
  std::unique_ptr<Connection> acquire(const std::string& what);
  void release(std::unique_ptr<Connection> conn);
  // Throws TimeoutError for a kTimeout response (naming the missing keys) and
  // InvalidArgument for a kError one.
  void check_status(const std::vector<uint8_t>& body, const std::string& what, Duration timeout);

  TCPStoreOptions options_;
  std::unique_ptr<TCPStoreServer> server_;
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<Connection>> idle_;  // guarded by pool_mu_
};

}  // namespace spmd
