// The shared-memory ring (parallel/comm/shm/shm_ring.h) on its own, between
// two threads of one process: a byte stream through many wrap-arounds in
// pieces of random sizes against the generator that made it, and the
// asleep flags that decide who rings the doorbell.
#include <sys/uio.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <new>
#include <random>
#include <thread>
#include <vector>

#include "parallel/comm/shm/shm_ring.h"

TEST_CASE("the ring carries a byte stream intact through wrap-around, in pieces of any size",
          "[comm][shm]") {
  using namespace spmd::dist::shm;
  constexpr size_t kCapacity = 4096, kTotal = 3 << 20;
  void* mem = std::aligned_alloc(kCacheLine, sizeof(RingControl) + kCapacity);
  auto* control = new (mem) RingControl();
  char* data = static_cast<char*>(mem) + sizeof(RingControl);
  RingWriter writer(control, data, kCapacity);
  RingReader reader(control, data, kCapacity);
  auto byte_at = [](size_t i) { return char((i * 2654435761u) >> 13); };

  std::thread producer([&] {
    std::mt19937 rng(1);
    std::vector<char> a(10000), b(10000);
    for (size_t sent = 0; sent < kTotal;) {
      const size_t n1 = std::min<size_t>(rng() % 9000 + 1, kTotal - sent);
      const size_t n2 = std::min<size_t>(rng() % 300, kTotal - sent - n1);
      for (size_t i = 0; i < n1; ++i) a[i] = byte_at(sent + i);
      for (size_t i = 0; i < n2; ++i) b[i] = byte_at(sent + n1 + i);
      iovec iov[2] = {{a.data(), n1}, {b.data(), n2}};
      size_t done = 0;
      while (done < n1 + n2) {  // resubmit the rest after a partial write
        iovec rest[2];
        size_t k = 0, skip = done;
        for (const iovec& v : iov) {
          if (skip >= v.iov_len) {
            skip -= v.iov_len;
            continue;
          }
          rest[k++] = {static_cast<char*>(v.iov_base) + skip, v.iov_len - skip};
          skip = 0;
        }
        bool wake = false;
        const size_t w = writer.write(rest, k, wake);
        if (w == 0) std::this_thread::yield();
        done += w;
      }
      sent += n1 + n2;
    }
  });
  std::mt19937 rng(2);
  std::vector<char> got(kTotal);
  size_t received = 0;
  bool peeked_ok = true;
  while (received < kTotal) {
    char first = 0;
    if (reader.peek(&first, 1) == 1 && first != byte_at(received)) peeked_ok = false;
    const size_t want = std::min<size_t>(rng() % 7000 + 1, kTotal - received);
    iovec iov{got.data() + received, want};
    bool wake = false;
    const size_t r = reader.read(&iov, 1, wake);
    if (r == 0) std::this_thread::yield();
    received += r;
  }
  producer.join();
  size_t bad = kTotal;
  for (size_t i = 0; i < kTotal && bad == kTotal; ++i) {
    if (got[i] != byte_at(i)) bad = i;
  }
  CHECK(bad == kTotal);
  CHECK(peeked_ok);
  std::free(mem);
}

TEST_CASE("a sleeper's flag makes the next write ask for a wake-up, once", "[comm][shm]") {
  using namespace spmd::dist::shm;
  constexpr size_t kCapacity = 4096;
  void* mem = std::aligned_alloc(kCacheLine, sizeof(RingControl) + kCapacity);
  auto* control = new (mem) RingControl();
  char* data = static_cast<char*>(mem) + sizeof(RingControl);
  RingWriter writer(control, data, kCapacity);
  RingReader reader(control, data, kCapacity);
  char buf[kCapacity] = {};
  iovec one{buf, 8};
  bool wake = true;
  CHECK_FALSE(reader.arm());  // empty: it may sleep
  writer.write(&one, 1, wake);
  CHECK(wake);  // the writer must ring
  writer.write(&one, 1, wake);
  CHECK_FALSE(wake);    // the flag was cleared by the first ring
  CHECK(reader.arm());  // bytes are there: do not sleep
  iovec all{buf, kCapacity};
  reader.read(&all, 1, wake);
  CHECK_FALSE(wake);
  iovec full{buf, kCapacity};
  CHECK(writer.write(&full, 1, wake) == kCapacity);
  CHECK_FALSE(writer.arm());  // full: the writer may sleep
  iovec some{buf, 100};
  CHECK(reader.read(&some, 1, wake) == 100);
  CHECK(wake);  // the reader must ring for the sleeping writer
  std::free(mem);
}
