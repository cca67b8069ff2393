// The single-producer single-consumer byte ring of a shared-memory channel
// (shm_channel.h), as each end sees it. It lives in memory both processes
// map:
//
//   RingControl   4 cache lines, one counter each:
//     head            bytes ever written (stored by the producer only)
//     tail            bytes ever read (stored by the consumer only)
//     reader_asleep   1: the consumer may sleep until head moves
//     writer_asleep   1: the producer may sleep until tail moves
//   data          `capacity` bytes (a power of two, whole cache lines):
//                 byte i of the stream sits at data[i % capacity]
//
// The counters only grow (64 bits do not wrap), so head - tail is what is in
// the ring, and neither end ever writes the other's counter: each line has
// one writer, and the other end only reads it. Each end also keeps the
// other's counter as last seen, and reloads it only when that says the ring
// is full (producer) or empty (consumer), so a stream of writes does not pull
// the consumer's line to the producer's core on every call.
//
// Memory ordering (docs/shm.md, "Memory ordering"):
//   - data: the producer copies bytes in, then stores head with release; the
//     consumer loads head with acquire, then copies them out. Release and
//     acquire make the bytes visible before the count that covers them.
//   - room: the consumer copies bytes out, then stores tail with release; the
//     producer loads tail with acquire before it overwrites those bytes, so
//     the consumer's reads are done first.
//   - sleep: an end about to sleep stores its asleep flag, issues a seq_cst
//     fence, then reloads the other's counter; the other end stores its
//     counter, issues a seq_cst fence, then loads the flag. Of two such
//     store-fence-load sequences at least one load sees the other's store, so
//     either the sleeper sees the progress (and does not sleep) or the one
//     that made it sees the flag (and rings the doorbell): no lost wake-up.
//     The flag is cleared by whoever rings (exchange), so one sleep costs at
//     most one doorbell.
#pragma once

#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace spmd::dist::shm {

inline constexpr size_t kCacheLine = 64;

struct alignas(kCacheLine) RingCounter {
  std::atomic<uint64_t> value{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "the ring's counters must be lock-free to be shared between processes");

struct RingControl {
  RingCounter head;
  RingCounter tail;
  RingCounter reader_asleep;
  RingCounter writer_asleep;
};
static_assert(sizeof(RingControl) == 4 * kCacheLine, "one cache line per counter");

// The end of a write or read of `total` bytes, the same for both ends: if
// it moved any, it looks (after a full fence, the pair of the one in arm())
// whether the other end went to sleep, and takes the flag down so that one
// caller rings the doorbell (`wake`). Returns total.
inline size_t finish_transfer(size_t total, RingCounter& peer_asleep, bool& wake) {
  wake = false;
  if (total == 0) return 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (peer_asleep.value.load(std::memory_order_relaxed) != 0) {
    wake = peer_asleep.value.exchange(0, std::memory_order_relaxed) != 0;
  }
  return total;
}

// An end publishes its counter after at most this many bytes, so the other
// end starts on a large message before it has all been copied.
inline constexpr size_t kPublishBytes = 64 << 10;

class RingWriter {
 public:
  RingWriter() = default;
  RingWriter(RingControl* control, char* data, size_t capacity)
      : c_(control), data_(data), mask_(capacity - 1) {}

  // Copies as much of iov[0..n) as fits; returns the bytes taken. Sets
  // `wake` when the consumer asked to be woken (its flag is then cleared).
  size_t write(const iovec* iov, size_t n, bool& wake) {
    size_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      const char* src = static_cast<const char*>(iov[i].iov_base);
      size_t len = iov[i].iov_len;
      while (len > 0) {
        size_t room = capacity() - size_t(head_ - tail_seen_);
        if (room == 0) {
          tail_seen_ = c_->tail.value.load(std::memory_order_acquire);
          room = capacity() - size_t(head_ - tail_seen_);
          if (room == 0) return finish(total, wake);
        }
        const size_t take = std::min({len, room, kPublishBytes});
        copy_in(src, take);
        head_ += take;
        c_->head.value.store(head_, std::memory_order_release);
        src += take;
        len -= take;
        total += take;
      }
    }
    return finish(total, wake);
  }

  // About to sleep until there is room: true when there is some already
  // (do not sleep).
  bool arm() {
    c_->writer_asleep.value.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    tail_seen_ = c_->tail.value.load(std::memory_order_relaxed);
    if (head_ - tail_seen_ < capacity()) {
      c_->writer_asleep.value.store(0, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);  // the reads before tail are done
      return true;
    }
    return false;
  }

  size_t capacity() const { return mask_ + 1; }

 private:
  size_t finish(size_t total, bool& wake) {
    return finish_transfer(total, c_->reader_asleep, wake);
  }
  void copy_in(const char* src, size_t n) {
    const size_t at = size_t(head_) & mask_;
    const size_t first = std::min(n, capacity() - at);
    std::memcpy(data_ + at, src, first);
    if (n > first) std::memcpy(data_, src + first, n - first);
  }

  RingControl* c_ = nullptr;
  char* data_ = nullptr;
  size_t mask_ = 0;
  uint64_t head_ = 0;       // ours: what we have written
  uint64_t tail_seen_ = 0;  // the consumer's, as last loaded
};

class RingReader {
 public:
  RingReader() = default;
  RingReader(RingControl* control, char* data, size_t capacity)
      : c_(control), data_(data), mask_(capacity - 1) {}

  // Fills iov[0..n) with what has arrived; returns the bytes. Sets `wake`
  // when the producer asked to be woken.
  size_t read(const iovec* iov, size_t n, bool& wake) {
    size_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      char* dst = static_cast<char*>(iov[i].iov_base);
      size_t len = iov[i].iov_len;
      while (len > 0) {
        size_t ready = size_t(head_seen_ - tail_);
        if (ready == 0) {
          head_seen_ = c_->head.value.load(std::memory_order_acquire);
          ready = size_t(head_seen_ - tail_);
          if (ready == 0) return finish(total, wake);
        }
        const size_t take = std::min({len, ready, kPublishBytes});
        copy_out(tail_, dst, take);
        tail_ += take;
        c_->tail.value.store(tail_, std::memory_order_release);
        dst += take;
        len -= take;
        total += take;
      }
    }
    return finish(total, wake);
  }

  // Copies up to n arrived bytes without consuming them.
  size_t peek(void* dst, size_t n) {
    head_seen_ = c_->head.value.load(std::memory_order_acquire);
    const size_t take = std::min(n, size_t(head_seen_ - tail_));
    copy_out(tail_, static_cast<char*>(dst), take);
    return take;
  }

  // About to sleep until bytes arrive: true when some have (do not sleep).
  bool arm() {
    c_->reader_asleep.value.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    head_seen_ = c_->head.value.load(std::memory_order_relaxed);
    if (head_seen_ != tail_) {
      c_->reader_asleep.value.store(0, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);  // the bytes behind head
      return true;
    }
    return false;
  }

  size_t capacity() const { return mask_ + 1; }

 private:
  size_t finish(size_t total, bool& wake) {
    return finish_transfer(total, c_->writer_asleep, wake);
  }
  void copy_out(uint64_t from, char* dst, size_t n) const {
    const size_t at = size_t(from) & mask_;
    const size_t first = std::min(n, capacity() - at);
    std::memcpy(dst, data_ + at, first);
    if (n > first) std::memcpy(dst + first, data_, n - first);
  }

  RingControl* c_ = nullptr;
  char* data_ = nullptr;
  size_t mask_ = 0;
  uint64_t tail_ = 0;       // ours: what we have read
  uint64_t head_seen_ = 0;  // the producer's, as last loaded
};

}  // namespace spmd::dist::shm
