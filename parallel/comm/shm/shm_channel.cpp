// The shared-memory channel: the doorbell protocol over the rings, and the
// set-up of the segments (see the header).
#include "parallel/comm/shm/shm_channel.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "parallel/comm/shm/shm_segment.h"
#include "runtime/error.h"
#include "runtime/logging.h"

namespace spmd::dist::shm {
namespace {

constexpr uint64_t kSegmentMagic = 0x73706d6473686d31ull;  // "spmdshm1"

struct alignas(kCacheLine) SegmentHeader {
  uint64_t magic;
  uint64_t ring_bytes;
};

size_t ring_offset(int which, size_t ring_bytes) {
  return kCacheLine + size_t(which) * (sizeof(RingControl) + ring_bytes);
}
size_t segment_bytes(size_t ring_bytes) { return ring_offset(2, ring_bytes); }

// What the lower rank sends the higher one: the segment to open.
struct Offer {
  uint64_t magic = kSegmentMagic;
  uint64_t ring_bytes = 0;
  char name[48] = {};
};

// Makes the segment of one pair and sets up its two rings.
SharedSegment create_pair_segment(size_t ring_bytes, int rank, int peer) {
  SharedSegment c =
      create_segment(segment_bytes(ring_bytes), str_cat(rank, "-", peer), str_cat("rank ", peer));
  new (c.base) SegmentHeader{kSegmentMagic, ring_bytes};
  for (int which = 0; which < 2; ++which) {
    new (static_cast<char*>(c.base) + ring_offset(which, ring_bytes)) RingControl();
  }
  return c;
}

// Opens the segment the lower rank offered and unlinks its name at once.
void* open_pair_segment(const Offer& offer, int peer, size_t& bytes) {
  const std::string name(offer.name, strnlen(offer.name, sizeof offer.name));
  SPMD_CHECK(offer.magic == kSegmentMagic && !name.empty(), "shared memory with rank ", peer,
             ": the peer sent a malformed offer (is it another version of spmd?)");
  bytes = segment_bytes(size_t(offer.ring_bytes));
  void* base = open_segment(name, bytes, /*unlink=*/true, str_cat("rank ", peer));
  const auto* h = static_cast<const SegmentHeader*>(base);
  if (h->magic != kSegmentMagic || h->ring_bytes != offer.ring_bytes) {
    ::munmap(base, bytes);
    SPMD_THROW(CommError, "shared memory with rank ", peer, ": segment ", name,
               " does not hold the header its creator wrote");
  }
  return base;
}

}  // namespace

// --- The channel ---------------------------------------------------------------

ShmChannel::ShmChannel(int fd, void* base, size_t map_bytes, bool lower)
    : fd_(fd), base_(base), map_bytes_(map_bytes) {
  const size_t ring_bytes = static_cast<const SegmentHeader*>(base)->ring_bytes;
  auto at = [&](int which) { return static_cast<char*>(base) + ring_offset(which, ring_bytes); };
  auto control = [&](int which) { return reinterpret_cast<RingControl*>(at(which)); };
  auto data = [&](int which) { return at(which) + sizeof(RingControl); };
  const int mine = lower ? 0 : 1, theirs = 1 - mine;
  out_ = RingWriter(control(mine), data(mine), ring_bytes);
  in_ = RingReader(control(theirs), data(theirs), ring_bytes);
}

ShmChannel::~ShmChannel() {
  ::munmap(base_, map_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

ssize_t ShmChannel::write(const iovec* iov, size_t n) {
  if (closed_) {
    errno = closed_errno_ ? closed_errno_ : EPIPE;
    return -1;
  }
  bool wake = false;
  const size_t moved = out_.write(iov, n, wake);
  if (wake) ring_doorbell();
  if (moved == 0) {
    errno = EAGAIN;
    return -1;
  }
  return ssize_t(moved);
}

ssize_t ShmChannel::read(const iovec* iov, size_t n) {
  bool wake = false;
  const size_t moved = in_.read(iov, n, wake);
  if (wake) ring_doorbell();
  if (moved > 0) return ssize_t(moved);
  if (closed_) {  // what the peer wrote before it went is all read
    if (closed_errno_ == 0) return 0;
    errno = closed_errno_;
    return -1;
  }
  errno = EAGAIN;
  return -1;
}

ssize_t ShmChannel::peek(void* dst, size_t n) {
  const size_t got = in_.peek(dst, n);
  if (got > 0) return ssize_t(got);
  errno = EAGAIN;
  return -1;
}

// Takes the doorbells (and the news of a closed socket), then raises the
// asleep flags for what the caller waits for and looks once more.
short ShmChannel::prepare_wait(short want) {
  drain();
  if (closed_) return 0;
  bool ready = false;
  if (want & POLLIN) ready |= in_.arm();
  if (want & POLLOUT) ready |= out_.arm();
  return ready ? 0 : short(POLLIN);
}

void ShmChannel::drain() {
  char buf[64];
  while (!closed_) {
    const ssize_t r = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (r > 0) continue;
    if (r == 0) {
      closed_ = true;
    } else if (errno == EINTR) {
      continue;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      closed_ = true;
      closed_errno_ = errno;
    }
    return;
  }
}

// A full socket buffer already holds a doorbell, and a dead peer needs none:
// the result does not matter.
void ShmChannel::ring_doorbell() {
  const char b = 1;
  [[maybe_unused]] ssize_t r = ::send(fd_, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

// --- Set-up ------------------------------------------------------------------------

// Three passes, so no rank waits on one that waits on it: every lower end
// offers its segments (small sends the socket buffers take at once), every
// higher end opens what it was offered and acknowledges, every lower end
// reads its acknowledgements. An offer without a name, or an
// acknowledgement of 0, says that this end could not make or map the
// segment: with `fallback` the pair keeps its socket, else both fail.
std::vector<std::unique_ptr<tcp::Channel>> make_channels(std::vector<int> fds,
                                                         const std::vector<bool>& use_shm, int rank,
                                                         size_t ring_bytes, bool fallback,
                                                         net::Deadline deadline) {
  const int size = int(fds.size());
  SPMD_CHECK(ring_bytes >= 4096 && (ring_bytes & (ring_bytes - 1)) == 0, "shared-memory ring of ",
             ring_bytes, " bytes: must be a power of two >= 4096");
  std::vector<std::unique_ptr<tcp::Channel>> channels(size);
  std::vector<SharedSegment> created(size);
  auto give_up = [&](int peer, const std::string& why) {
    if (!fallback) SPMD_THROW(CommError, why);
    SPMD_LOG_WARN(why, "; rank ", rank, " and rank ", peer, " use TCP instead");
  };
  try {
    for (int peer = rank + 1; peer < size; ++peer) {
      if (!use_shm[peer]) continue;
      Offer offer;
      try {
        created[peer] = create_pair_segment(ring_bytes, rank, peer);
        offer.ring_bytes = ring_bytes;
        std::memcpy(offer.name, created[peer].name.c_str(), created[peer].name.size());
      } catch (const Error& e) {
        net::send_all(fds[peer], &offer, sizeof offer, deadline);  // no name: declined
        give_up(peer, e.what());
        continue;
      }
      net::send_all(fds[peer], &offer, sizeof offer, deadline);
    }
    for (int peer = 0; peer < rank; ++peer) {
      if (!use_shm[peer]) continue;
      Offer offer;
      net::recv_all(fds[peer], &offer, sizeof offer, deadline);
      if (offer.name[0] == '\0') {
        give_up(peer, str_cat("rank ", peer,
                              " could not make the shared-memory segment "
                              "for this pair (its log says why)"));
        continue;
      }
      size_t bytes = 0;
      void* base = nullptr;
      try {
        base = open_pair_segment(offer, peer, bytes);
      } catch (const Error& e) {
        const char nak = 0;
        net::send_all(fds[peer], &nak, 1, deadline);
        give_up(peer, e.what());
        continue;
      }
      channels[peer] = std::make_unique<ShmChannel>(fds[peer], base, bytes, /*lower=*/false);
      fds[peer] = -1;
      const char ack = 1;
      net::send_all(channels[peer]->fd(), &ack, 1, deadline);
    }
    for (int peer = rank + 1; peer < size; ++peer) {
      if (!use_shm[peer] || created[peer].base == nullptr) continue;
      char ack = 0;
      net::recv_all(fds[peer], &ack, 1, deadline);
      ::shm_unlink(created[peer].name.c_str());
      if (ack != 1) {
        unmap_segment(created[peer]);
        created[peer] = SharedSegment{};
        give_up(peer, str_cat("rank ", peer,
                              " could not map the shared-memory segment for "
                              "this pair (its log says why)"));
        continue;
      }
      channels[peer] = std::make_unique<ShmChannel>(fds[peer], created[peer].base,
                                                    created[peer].bytes, /*lower=*/true);
      created[peer] = SharedSegment{};
      fds[peer] = -1;
    }
  } catch (...) {
    for (const SharedSegment& c : created) {
      if (c.base == nullptr) continue;
      ::shm_unlink(c.name.c_str());
      unmap_segment(c);
    }
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
    throw;
  }
  for (int peer = 0; peer < size; ++peer) {
    if (fds[peer] >= 0) channels[peer] = std::make_unique<tcp::SocketChannel>(fds[peer]);
  }
  return channels;
}

}  // namespace spmd::dist::shm
