// The caching host allocator (allocator.h): size classes, a free list per
// class, a cap on what the cache may hold.
#include "tensor/cpu/allocator.h"

#include <sys/mman.h>

#include <bit>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "runtime/error.h"

namespace spmd::cpu {
namespace {

constexpr size_t kAlignment = 64;                 // a cache line, the widest vector register
constexpr size_t kMinCached = size_t(128) << 10;  // 128 KiB: glibc's mmap threshold (allocator.h)
constexpr size_t kMinRounded = size_t(1) << 20;   // 1 MiB: classes coarser than the alignment
constexpr size_t kHugePage = size_t(2) << 20;     // 2 MiB transparent huge pages

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

class HostAllocator {
 public:
  HostAllocator() {
    const char* env = std::getenv("SPMD_CPU_CACHE_MB");
    cap_ = size_t(env ? std::strtoull(env, nullptr, 10) : 2048) << 20;
  }

  void* allocate(size_t size) {
    if (size >= kMinCached) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(size);
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        stats_.cached -= size;
        note_allocated(size);
        return p;
      }
    }
    void* p = system_allocate(size);
    if (p == nullptr) {  // give the cache back and try once more
      empty_cache();
      p = system_allocate(size);
    }
    if (p == nullptr) SPMD_THROW(OutOfMemoryError, "cpu: cannot allocate ", size, " bytes");
    std::lock_guard<std::mutex> lock(mu_);
    note_allocated(size);
    return p;
  }

  void release(void* p, size_t size) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.allocated -= size;
      if (size >= kMinCached && stats_.cached + size <= cap_) {
        free_.emplace(size, p);
        stats_.cached += size;
        return;
      }
    }
    std::free(p);
  }

  void empty_cache() {
    std::multimap<size_t, void*> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      blocks.swap(free_);
      stats_.cached = 0;
    }
    for (auto& [size, p] : blocks) std::free(p);
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
  static void* system_allocate(size_t size) {
    if (size < 2 * kHugePage) return std::aligned_alloc(kAlignment, size);
    const size_t rounded = (size + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, rounded);
    if (p != nullptr) madvise(p, rounded, MADV_HUGEPAGE);  // a hint; failure is harmless
    return p;
  }

  void note_allocated(size_t size) {
    stats_.allocated += size;
    stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  }

  std::mutex mu_;
  std::multimap<size_t, void*> free_;  // size class -> cached blocks
  HostMemoryStats stats_;
  size_t cap_ = 0;
};

// Never destroyed: tensors freed during static destruction still find it.
HostAllocator& allocator() {
  static HostAllocator* a = new HostAllocator();
  return *a;
}

}  // namespace

DataPtr allocate_host(size_t nbytes) {
  const size_t size = size_class(nbytes);
  return DataPtr(allocator().allocate(size), [size](void* p) { allocator().release(p, size); });
}

void empty_host_cache() { allocator().empty_cache(); }

HostMemoryStats host_memory_stats() { return allocator().stats(); }

void reset_host_peak_memory() { allocator().reset_peak(); }

}  // namespace spmd::cpu
