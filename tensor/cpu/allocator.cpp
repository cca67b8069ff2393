// The caching host allocator (allocator.h): size classes, a free list per
// class (apart for shareable blocks), a cap on what the cache may hold.
#include "tensor/cpu/allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "runtime/error.h"
#include "tensor/cpu/shareable_blocks.h"

namespace spmd::cpu {
namespace {

constexpr size_t kAlignment = 64;                 // a cache line, the widest vector register
constexpr size_t kMinCached = size_t(128) << 10;  // 128 KiB: glibc's mmap threshold (allocator.h)
constexpr size_t kMinRounded = size_t(1) << 20;   // 1 MiB: classes coarser than the alignment
constexpr size_t kHugePage = size_t(2) << 20;     // 2 MiB transparent huge pages

// Blocks of at least this many bytes are shareable (0: none); share_host_blocks_from.
std::atomic<size_t> share_from{0};

// The size a request is served at: below kMinRounded a multiple of the
// alignment (a step's mid-sized activations repeat their exact sizes);
// above, rounded up to 1/16 of its power of two (at most 6.25% waste) so
// that nearby sizes share a class.
size_t size_class(size_t nbytes) {
  nbytes = std::max<size_t>(nbytes, 1);
  if (nbytes < kMinRounded) return (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  const size_t step = std::bit_floor(nbytes) / 16;
  return (nbytes + step - 1) / step * step;
}

// The value of an environment variable that must be a whole number in
// [0, max], or `fallback` when unset or empty.
size_t env_count(const char* key, size_t fallback, size_t max) {
  const char* env = std::getenv(key);
  if (env == nullptr || *env == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(env, &end, 10);
  SPMD_CHECK(*end == '\0' && errno == 0 && env[0] != '-' && v <= max, key, "=", env,
             ": expected a whole number from 0 to ", max);
  return size_t(v);
}

class HostAllocator {
 public:
  HostAllocator()
      : cap_(env_count("SPMD_CPU_CACHE_MB", 2048, size_t(1) << 30) << 20),
        huge_pages_(env_count("SPMD_HUGE_PAGES", 0, 1) == 1) {}

  // A block of `size` bytes (a size class); *shared says whether it is a
  // shareable one, which release() must be told.
  void* allocate(size_t size, bool* shared) {
    const size_t from = share_from.load(std::memory_order_relaxed);
    *shared = from > 0 && size >= from;
    auto& cache = *shared ? free_shared_ : free_;
    if (size >= kMinCached || *shared) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache.find(size);
      if (it != cache.end()) {
        void* p = it->second;
        cache.erase(it);
        stats_.cached -= size;
        note_allocated(size);
        return p;
      }
    }
    void* p = *shared ? detail::map_shareable_block(page_rounded(size)) : nullptr;
    if (p == nullptr) *shared = false;  // refused (no descriptor left): an ordinary block
    if (p == nullptr) p = system_allocate(size);
    if (p == nullptr) {  // give the cache back and try once more
      empty_cache();
      p = system_allocate(size);
    }
    if (p == nullptr) SPMD_THROW(OutOfMemoryError, "cpu: cannot allocate ", size, " bytes");
    std::lock_guard<std::mutex> lock(mu_);
    note_allocated(size);
    return p;
  }

  void release(void* p, size_t size, bool shared) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.allocated -= size;
      if ((size >= kMinCached || shared) && stats_.cached + size <= cap_) {
        (shared ? free_shared_ : free_).emplace(size, p);
        stats_.cached += size;
        return;
      }
    }
    free_block(p, size, shared);
  }

  // Frees the ordinary cached blocks of at least min_bytes: from now on
  // blocks of their sizes come from the shareable cache, so these would
  // never be handed out again, yet count against the cap.
  void drop_cached_from(size_t min_bytes) {
    std::multimap<size_t, void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto first = free_.lower_bound(min_bytes);
      for (auto it = first; it != free_.end(); ++it) stats_.cached -= it->first;
      blocks.insert(first, free_.end());
      free_.erase(first, free_.end());
    }
    for (auto& [size, p] : blocks) free_block(p, size, false);
  }

  void empty_cache() {
    std::multimap<size_t, void*> blocks, shared;
    {
      std::lock_guard<std::mutex> lock(mu_);
      blocks.swap(free_);
      shared.swap(free_shared_);
      stats_.cached = 0;
    }
    for (auto& [size, p] : blocks) free_block(p, size, false);
    for (auto& [size, p] : shared) free_block(p, size, true);
  }

  HostMemoryStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_allocated = stats_.allocated;
  }

 private:
  // With SPMD_HUGE_PAGES=1, blocks of 4 MiB or more are 2 MiB aligned and
  // advised to use transparent huge pages (allocator.h says why not by default).
  void* system_allocate(size_t size) const {
    if (!huge_pages_ || size < 2 * kHugePage) return std::aligned_alloc(kAlignment, size);
    const size_t rounded = (size + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, rounded);
    if (p != nullptr) madvise(p, rounded, MADV_HUGEPAGE);  // a hint; failure is harmless
    return p;
  }

  static size_t page_rounded(size_t size) {
    static const size_t page = size_t(::sysconf(_SC_PAGESIZE));
    return (size + page - 1) / page * page;
  }

  static void free_block(void* p, size_t size, bool shared) {
    if (shared) return detail::unmap_shareable_block(p, page_rounded(size));
    std::free(p);
  }

  void note_allocated(size_t size) {
    stats_.allocated += size;
    stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  }

  std::mutex mu_;
  std::multimap<size_t, void*> free_;         // size class -> cached blocks
  std::multimap<size_t, void*> free_shared_;  // the same, of shareable blocks
  HostMemoryStats stats_;
  const size_t cap_;
  const bool huge_pages_;
};

// Never destroyed: tensors freed during static destruction still find it.
HostAllocator& allocator() {
  static HostAllocator* a = new HostAllocator();
  return *a;
}

}  // namespace

DataPtr allocate_host(size_t nbytes) {
  const size_t size = size_class(nbytes);
  bool shared = false;
  void* p = allocator().allocate(size, &shared);
  return DataPtr(p, [size, shared](void* q) { allocator().release(q, size, shared); });
}

void share_host_blocks_from(size_t min_bytes) {
  if (min_bytes == 0) return;
  size_t now = share_from.load();
  while ((now == 0 || min_bytes < now) && !share_from.compare_exchange_weak(now, min_bytes)) {
  }
  if (now == 0 || min_bytes < now) allocator().drop_cached_from(min_bytes);
}

void empty_host_cache() { allocator().empty_cache(); }

HostMemoryStats host_memory_stats() { return allocator().stats(); }

void reset_host_peak_memory() { allocator().reset_peak(); }

}  // namespace spmd::cpu
