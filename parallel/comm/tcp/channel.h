// Channel: the byte pipe to one peer under a Link (collectives) or the
// point-to-point engine: bytes go in order, nothing blocks. Two kinds:
//   - SocketChannel: the TCP socket itself;
//   - ShmChannel (../shm/shm_channel.h): two single-producer single-consumer rings
//     in a segment both processes map, for a peer on this host; the socket
//     stays as its doorbell (a byte wakes a peer asleep in poll()) and as
//     the sign of the peer's death (the kernel closes it).
// The calls mirror sendmsg/recvmsg with MSG_DONTWAIT, so the code above reads
// the same over either. Waiting is the caller's: it spins on write()/read(),
// then asks prepare_wait() what to poll() for, sleeps, and calls on_wakeup()
// for a channel whose descriptor turned ready.
//
// Thread-safety: none; one thread at a time (a Link's collective thread, or
// the point-to-point engine under its mutex). shutdown() from any thread.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>

namespace spmd::dist::tcp {

class Channel {
 public:
  virtual ~Channel() = default;

  // Takes as much of iov[0..n) as fits now: the bytes taken (> 0), or -1
  // with errno set (EAGAIN: nothing fits now; anything else: the peer is
  // gone).
  virtual ssize_t write(const iovec* iov, size_t n) = 0;
  // Fills iov[0..n) with what has arrived: the bytes (> 0), 0 when the peer
  // closed its end and nothing is left, or -1 with errno set (EAGAIN:
  // nothing yet).
  virtual ssize_t read(const iovec* iov, size_t n) = 0;
  // Copies up to n arrived bytes to dst without consuming them: the bytes,
  // or -1 (EAGAIN: none).
  virtual ssize_t peek(void* dst, size_t n) = 0;

  // Before the caller sleeps in poll() until it can read (POLLIN in `want`)
  // or write (POLLOUT): the events to poll fd() for, or 0 when it can
  // already (do not sleep: call read()/write() again).
  virtual short prepare_wait(short want) = 0;
  // fd() turned ready (poll/epoll said so): take note before read()/write().
  virtual void on_wakeup() {}
  // Whether a wake-up on fd() may mean that either direction can move (the
  // caller then tries both), rather than what poll()'s events say.
  virtual bool wakes_both() const = 0;
  // Wakes the peer if it sleeps in poll() on its end of this channel, with
  // no data: a shared-memory channel's doorbell byte (a peer waiting for
  // memory it shares with this rank, outside the channel, sleeps there).
  // Returns false on a socket, whose bytes are all data.
  virtual bool doorbell() { return false; }

  virtual int fd() const = 0;
  // "tcp" or "shm", for messages and tests.
  virtual const char* kind() const = 0;
  // Shuts the socket down in both directions: the peer sees EOF at once,
  // and every later read or write here fails. Safe from any thread.
  void shutdown();
};

// A connected non-blocking TCP socket (owned: closed on destruction).
class SocketChannel final : public Channel {
 public:
  explicit SocketChannel(int fd) : fd_(fd) {}
  ~SocketChannel() override;
  SocketChannel(const SocketChannel&) = delete;
  SocketChannel& operator=(const SocketChannel&) = delete;

  ssize_t write(const iovec* iov, size_t n) override;
  ssize_t read(const iovec* iov, size_t n) override;
  ssize_t peek(void* dst, size_t n) override;
  short prepare_wait(short want) override { return want; }
  bool wakes_both() const override { return false; }
  int fd() const override { return fd_; }
  const char* kind() const override { return "tcp"; }

 private:
  int fd_;
};

}  // namespace spmd::dist::tcp
