// P2PEngine: the TCP backend's point-to-point messages (send/recv with tags).
//
// Unlike collectives, point-to-point operations do not run in one global
// order: rank 0 may send to 1 and then receive from 2 while rank 2 first
// receives from 1; a send and the matching recv may be posted in either order;
// and a tagged message may arrive before its recv exists. So they do not go
// through the collective worker. Each group keeps a second connection per
// pair for them.
//
// Who moves the bytes. Posting an operation tries its I/O at once, on the
// caller's thread (a small send usually leaves whole; a recv whose message
// is already here completes). What remains is driven, as a collective is
// (../host/collective_queue.h), by the thread that waits on it: it pumps the
// sockets itself, spinning for a bounded time and then sleeping in poll()
// on them, so a message wakes the one thread that needs it. Only what no
// thread waits on for `start_after` goes to the engine's thread (asleep on a
// timerfd until then), which drives it through edge-triggered epoll. The old
// design (every operation handed to the engine thread, every completion
// handed back) paid a thread's wake-up twice per message
// (docs/measurements/comm.md).
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
// recv disagree on size or dtype (InvalidArgument on the receiver, the
// message discarded; the sender is sent a refusal that fails the send, or
// the pair when the send had completed: p2p_refusal.cpp).
//
// Thread-safety: every public method may be called from any thread; one
// mutex guards the engine's state, and Works are completed outside it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "parallel/comm/tcp/channel.h"
#include "parallel/comm/tcp/tuning.h"
#include "parallel/comm/tcp/wakeup_timer.h"
#include "parallel/comm/tcp/wire.h"
#include "parallel/comm/work.h"

namespace spmd::dist::tcp {

class P2PEngine {
 public:
  using Clock = std::chrono::steady_clock;

  // channels[peer] is the point-to-point channel (channel.h: a socket, or
  // shared memory) to each other rank (null for self). `group_name` and `timeout` are for errors
  // and deadlines. A waiting thread (or the engine's) pumps its sockets as `spin` says before
  // sleeping (tuning.h); the engine's thread takes over what nobody waits on after `start_after`.
  P2PEngine(std::string group_name, int rank, std::vector<std::unique_ptr<Channel>> channels,
            std::chrono::milliseconds timeout, SpinPolicy spin = {},
            std::chrono::microseconds start_after = std::chrono::microseconds(0));
  ~P2PEngine();  // stop(), then closes the channels
  P2PEngine(const P2PEngine&) = delete;
  P2PEngine& operator=(const P2PEngine&) = delete;

  // Sends n bytes (count elements of dtype) to `peer`; completes `work` once
  // the bytes are handed to the kernel. data must stay valid until then.
  void send(const void* data, size_t count, DType dtype, int peer, int tag, Work work);
  // Receives a message from `peer` with `tag` into dst (count elements of
  // dtype); completes `work` when it has arrived.
  void recv(void* dst, size_t count, DType dtype, int peer, int tag, Work work);

  // Called by a thread about to wait on `work` (an operation of this
  // engine): moves bytes until `work` completes or its deadline passes.
  // Returns false, doing nothing, when the engine's thread is driving
  // already (the caller then waits for the completion).
  bool drive(const Work& work);

  // Fails every pending operation with `why` and shuts the sockets down.
  void abort(const std::string& why);
  // Fails what is pending ("the process group was destroyed"), wakes every
  // waiting thread and stops the engine's thread. Later operations fail.
  void stop();

 private:
  struct Op;
  struct Unexpected;
  struct Peer;
  using Lock = std::unique_lock<std::mutex>;
  std::string describe_op(const Op& op) const;
  void post(std::unique_ptr<Op> op);
  void loop();
  void drive_from_engine(Lock& lock);
  bool pump_all(bool shm_only = false);
  short prepare_wait(Peer& peer, bool& ready);
  void pump_ready(Peer& peer, bool readable, bool writable);
  void sleep_on_sockets(Lock& lock, Clock::time_point until);
  void flush_completions(Lock& lock);
  void finish(Work work, std::exception_ptr error = nullptr);
  void schedule_engine_locked();
  bool check_stopped_locked();
  void start(std::unique_ptr<Op> op);
  void post_recv(Peer& peer, std::unique_ptr<Op> op);
  void write_some(Peer& peer);
  void read_some(Peer& peer);
  bool read_into(Peer& peer, char* dst, size_t n, size_t& done);
  void on_header(Peer& peer);
  void on_payload_done(Peer& peer);
  void spill_parked(Peer& peer);
  void refuse(Peer& peer, Op& recv, const Header& sent);
  bool begin_refusal(Peer& peer);
  void on_refusal(Peer& peer);
  void deliver_unexpected(Peer& peer);
  void expire(Clock::time_point now);
  Clock::time_point next_deadline() const;
  bool has_pending() const;
  void fail_peer(Peer& peer, const std::string& why);
  void wake_engine();

  std::string group_;
  int rank_;
  std::chrono::milliseconds timeout_;
  SpinPolicy spin_;
  std::chrono::microseconds start_after_;
  int epoll_fd_ = -1;  // the sockets, edge-triggered: the engine thread drives through it
  int event_fd_ = -1;  // wakes the engine thread at once
  std::mutex mu_;      // guards everything below
  std::vector<std::unique_ptr<Peer>> peers_;
  uint64_t progress_ = 0;        // counts the syscalls that moved bytes
  int drivers_ = 0;              // waiting threads driving right now
  bool engine_driving_ = false;  // the engine's thread is driving
  WakeupTimer timer_;            // wakes it when pending work has waited start_after for a driver
  // When the engine's thread takes over the pending work that no thread
  // drives (max: there is none, or a thread drives it).
  Clock::time_point engine_due_ = Clock::time_point::max();
  std::vector<std::pair<Work, std::exception_ptr>> completions_;  // run outside mu_
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace spmd::dist::tcp
