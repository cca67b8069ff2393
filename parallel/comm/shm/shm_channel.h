// ShmChannel: the channel to a peer on this host through a shared-memory
// segment: one ring each way (shm_ring.h), with the TCP socket of the pair
// kept beside it. The socket carries no data, only:
//   - doorbells: one byte, sent by an end that made progress the other asked
//     to be woken for (its asleep flag was set), so a rank asleep in poll()
//     on the socket wakes exactly as over TCP;
//   - the peer's death: the kernel closes a dead process's socket, so poll()
//     wakes and the next read sees EOF, as over TCP.
// Spinning on a ring costs no system call; sleeping costs one on each side.
//
// The segment (a POSIX shm object under /dev/shm, shm_segment.h): the lower rank of the pair
// creates it (O_EXCL, mode 0600), sizes and maps it, and sends its name over
// the socket; the higher rank opens it, unlinks it at once, maps it and
// acknowledges; the lower rank unlinks it too (a no-op by then) and on any
// failure. From then on the name is gone and the memory lives only as long as
// the two mappings: a group that shuts down, or a process killed by SIGKILL,
// leaves nothing in /dev/shm. (A process killed between the creation and the
// peer's open, during the group's set-up, leaves its segment behind; its name
// starts with "spmd-" and holds the creator's pid.)
//
//   offset 0                  SegmentHeader (one cache line)
//   kCacheLine                RingControl of ring 0 (lower rank -> higher)
//   + sizeof(RingControl)     ring 0's data (ring_bytes)
//   then                      RingControl and data of ring 1 (higher -> lower)
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/shm/shm_ring.h"
#include "parallel/comm/tcp/channel.h"
#include "runtime/socket.h"

namespace spmd::dist::shm {

class ShmChannel final : public tcp::Channel {
 public:
  // Over the mapped segment at `base` (map_bytes long; ownership taken, as
  // of socket `fd`); `lower` says which end this rank is.
  ShmChannel(int fd, void* base, size_t map_bytes, bool lower);
  ~ShmChannel() override;
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  ssize_t write(const iovec* iov, size_t n) override;
  ssize_t read(const iovec* iov, size_t n) override;
  ssize_t peek(void* dst, size_t n) override;
  short prepare_wait(short want) override;
  void on_wakeup() override { drain(); }
  bool wakes_both() const override { return true; }
  bool doorbell() override {
    ring_doorbell();
    return true;
  }
  int fd() const override { return fd_; }
  const char* kind() const override { return "shm"; }

 private:
  void drain();
  void ring_doorbell();

  int fd_;
  void* base_;
  size_t map_bytes_;
  RingWriter out_;
  RingReader in_;
  bool closed_ = false;  // the socket saw EOF or an error: the peer is gone
  int closed_errno_ = 0;
};

// Turns the sockets to the peers marked in `use_shm` into shared-memory
// channels (the others into SocketChannels); every rank of the group calls
// it with the same marks. fds[rank] is -1. Rings of ring_bytes (a power of
// two) each way. When a segment cannot be made or mapped (/dev/shm full, say)
// the pair keeps TCP with a warning if `fallback`, else both ends throw
// CommError naming the peer and the system call; TimeoutError past the
// deadline.
std::vector<std::unique_ptr<tcp::Channel>> make_channels(std::vector<int> fds,
                                                         const std::vector<bool>& use_shm, int rank,
                                                         size_t ring_bytes, bool fallback,
                                                         net::Deadline deadline);

}  // namespace spmd::dist::shm
