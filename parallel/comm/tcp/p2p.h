// P2PEngine: the TCP backend's point-to-point messages (send/recv with tags).
//
// Unlike collectives, point-to-point operations do not run in one global
// order: rank 0 may send to 1 and then receive from 2 while rank 2 first
// receives from 1; a send and the matching recv may be posted in either order;
// and a tagged message may arrive before its recv exists. So they do not go
// through the collective worker. Each group keeps a second connection per
// pair for them, driven by one engine thread that sleeps in edge-triggered
// epoll and is woken by data or by new operations (an eventfd).
//
// Matching follows MPI: a message from rank p with tag t goes to the oldest
// posted recv from p with tag t; messages between a pair with the same tag
// never overtake each other. A message that arrives before its recv is left
// in the socket ("parked") so that it can be read straight into the recv's
// buffer once posted; only if a recv for a different tag needs the bytes
// behind it is it read into a temporary buffer.
//
// Every operation fails instead of hanging: by its deadline (TimeoutError),
// when its peer's connection is lost (CommError), or when the message and the
// recv disagree on size or dtype (InvalidArgument; the message is discarded).
//
// Thread-safety: send() and recv() may be called from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "parallel/comm/tcp/wire.h"
#include "parallel/comm/work.h"

namespace spmd::dist::tcp {

class P2PEngine {
 public:
  using Clock = std::chrono::steady_clock;

  // fds[peer] is the point-to-point socket to each other rank (-1 for self);
  // the engine owns them. `group_name` and `timeout` are for errors and
  // deadlines.
  P2PEngine(std::string group_name, int rank, std::vector<int> fds,
            std::chrono::milliseconds timeout);
  ~P2PEngine();  // fails what is still pending, stops the thread, closes
  P2PEngine(const P2PEngine&) = delete;
  P2PEngine& operator=(const P2PEngine&) = delete;

  // Sends n bytes (count elements of dtype) to `peer`; completes `work` once
  // the bytes are handed to the kernel. data must stay valid until then.
  void send(const void* data, size_t count, DType dtype, int peer, int tag, Work work);
  // Receives a message from `peer` with `tag` into dst (count elements of
  // dtype); completes `work` when it has arrived.
  void recv(void* dst, size_t count, DType dtype, int peer, int tag, Work work);

  // Fails every pending operation with `why` and shuts the sockets down.
  void abort(const std::string& why);

 private:
  struct Op;
  struct Unexpected;
  struct Peer;
  std::string describe_op(const Op& op) const;
  void loop();
  void take_commands();
  void start(std::unique_ptr<Op> op);
  void post_recv(Peer& peer, std::unique_ptr<Op> op);
  void write_some(Peer& peer);
  void read_some(Peer& peer);
  bool read_into(Peer& peer, char* dst, size_t n, size_t& done);
  void on_header(Peer& peer);
  void on_payload_done(Peer& peer);
  void spill_parked(Peer& peer);
  void deliver_unexpected(Peer& peer);
  void expire(Clock::time_point now);
  int next_timeout_ms() const;
  void fail_peer(Peer& peer, const std::string& why);
  void wake();

  std::string group_;
  int rank_;
  std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<Peer>> peers_;
  int epoll_fd_ = -1;
  int event_fd_ = -1;
  std::mutex mu_;  // guards commands_ and stopping_
  std::vector<std::unique_ptr<Op>> commands_;
  bool stopping_ = false;
  std::string abort_reason_;  // set by abort(); the thread fails everything
  std::thread thread_;
};

}  // namespace spmd::dist::tcp
