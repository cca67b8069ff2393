// The caching allocator (tensor/cuda/allocator.h): allocation from the free
// lists, the return of blocks to them, the parking of blocks used on other
// streams, and the out-of-memory path.
#include "tensor/cuda/allocator.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kernels/cuda_check.h"
#include "tensor/cuda/context.h"

namespace spmd::cuda::detail {

struct CachingAllocator::Block {
  void* ptr;
  size_t size;  // the size class
  int device;
  cudaStream_t stream;       // the stream it was allocated for
  std::vector<Stream> uses;  // other streams it was used on (record_stream), held alive
};

namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kSmallLimit = size_t(1) << 20;
constexpr size_t kSmallStep = 512;

// A freed block waiting for the other streams that used it.
struct Parked {
  CachingAllocator::Block* block;
  std::vector<cudaEvent_t> events;
};

struct DevicePool {
  std::map<std::pair<cudaStream_t, size_t>, std::vector<CachingAllocator::Block*>> free;
  std::deque<Parked> parked;
  MemoryStats stats;
};

std::string format_bytes(size_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(n);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return buf;
}

// Moves parked blocks whose events have all completed to their free lists.
// `wait`: block on the events instead of polling them.
void collect_parked(DevicePool& pool, bool wait) {
  for (auto it = pool.parked.begin(); it != pool.parked.end();) {
    bool done = true;
    for (cudaEvent_t e : it->events) {
      const cudaError_t err = wait ? cudaEventSynchronize(e) : cudaEventQuery(e);
      if (err == cudaErrorNotReady)
        done = false;
      else if (err != cudaSuccess)
        (void)cudaGetLastError();  // treat a broken event as done
    }
    if (!done) {
      ++it;
      continue;
    }
    for (cudaEvent_t e : it->events) (void)cudaEventDestroy(e);
    CachingAllocator::Block* b = it->block;
    pool.free[{b->stream, b->size}].push_back(b);
    it = pool.parked.erase(it);
  }
}

// cudaFree's every cached block of the pool.
void release_cached(DevicePool& pool, int device) {
  DeviceScope scope(device);
  for (auto& [key, blocks] : pool.free) {
    for (CachingAllocator::Block* b : blocks) {
      SPMD_CUDA_CHECK(cudaFree(b->ptr));
      pool.stats.reserved -= b->size;
      delete b;
    }
  }
  pool.free.clear();
}

}  // namespace

struct CachingAllocator::State {
  std::mutex mu;
  DevicePool pools[kMaxDevices];
  std::unordered_map<const void*, Block*> live;
};

CachingAllocator& CachingAllocator::instance() {
  static CachingAllocator* allocator = new CachingAllocator();  // never destroyed
  return *allocator;
}

CachingAllocator::State& CachingAllocator::state() {
  static State* s = new State();  // never destroyed: see instance()
  return *s;
}

size_t CachingAllocator::round_size(size_t n) {
  if (n <= kSmallLimit) return std::max<size_t>(1, (n + kSmallStep - 1) / kSmallStep) * kSmallStep;
  size_t power = size_t(1) << (63 - __builtin_clzll(n));  // the largest power of two <= n
  const size_t step = power / 8;
  return (n + step - 1) / step * step;
}

DataPtr CachingAllocator::allocate(size_t nbytes, int device, cudaStream_t stream) {
  if (nbytes == 0) return DataPtr(nullptr, [](void*) {});
  SPMD_CHECK(device >= 0 && device < kMaxDevices, "CUDA allocator: bad device ", device);
  const size_t size = round_size(nbytes);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  DevicePool& pool = s.pools[device];
  if (!pool.parked.empty()) collect_parked(pool, /*wait=*/false);

  Block* block = nullptr;
  auto it = pool.free.find({stream, size});
  if (it != pool.free.end() && !it->second.empty()) {
    block = it->second.back();
    it->second.pop_back();
  } else {
    DeviceScope scope(device);
    void* ptr = nullptr;
    cudaError_t err = cudaMalloc(&ptr, size);
    if (err == cudaErrorMemoryAllocation) {  // release the cache and try once more
      (void)cudaGetLastError();
      collect_parked(pool, /*wait=*/true);
      release_cached(pool, device);
      err = cudaMalloc(&ptr, size);
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      (void)cudaMemGetInfo(&free_bytes, &total_bytes);
      SPMD_THROW(OutOfMemoryError, "CUDA out of memory on cuda:", device, ": tried to allocate ",
                 format_bytes(nbytes), "; spmd has ", format_bytes(pool.stats.allocated),
                 " allocated by tensors and ", format_bytes(pool.stats.reserved),
                 " reserved (cached included); the device has ", format_bytes(free_bytes),
                 " free of ", format_bytes(total_bytes));
    }
    SPMD_CUDA_CHECK(err);
    block = new Block{ptr, size, device, stream, {}};
    pool.stats.reserved += size;
    ++pool.stats.num_mallocs;
  }
  pool.stats.allocated += size;
  pool.stats.peak_allocated = std::max(pool.stats.peak_allocated, pool.stats.allocated);
  s.live[block->ptr] = block;
  return DataPtr(block->ptr, [block](void*) { CachingAllocator::instance().free(block); });
}

void CachingAllocator::free(Block* block) noexcept {
  // Declared before the lock, so released after it: dropping the last copy
  // of a stream synchronizes and destroys it, which must not stall the
  // allocator for every other thread.
  std::vector<Stream> uses;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  DevicePool& pool = s.pools[block->device];
  pool.stats.allocated -= block->size;
  s.live.erase(block->ptr);
  uses.swap(block->uses);
  if (uses.empty()) {
    pool.free[{block->stream, block->size}].push_back(block);
    return;
  }
  // Park it until every other stream that used it has passed this point.
  // Each of them is alive here: `uses` holds a copy of it.
  Parked parked{block, {}};
  int previous = -1;
  (void)cudaGetDevice(&previous);
  (void)cudaSetDevice(block->device);
  for (const Stream& use : uses) {
    const auto handle = static_cast<cudaStream_t>(use.handle());
    cudaEvent_t e = nullptr;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess &&
        cudaEventRecord(e, handle) == cudaSuccess) {
      parked.events.push_back(e);
    } else {  // cannot order it: wait for the stream instead
      (void)cudaGetLastError();
      if (e) (void)cudaEventDestroy(e);
      (void)cudaStreamSynchronize(handle);
    }
  }
  if (previous >= 0) (void)cudaSetDevice(previous);
  pool.parked.push_back(std::move(parked));
}

void CachingAllocator::record_stream(const void* ptr, const Stream& stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.live.find(ptr);
  SPMD_CHECK(it != s.live.end(),
             "record_stream: the tensor's memory was not allocated by spmd's CUDA allocator");
  Block* b = it->second;
  if (stream.handle() == b->stream) return;
  for (const Stream& u : b->uses)
    if (u == stream) return;
  b->uses.push_back(stream);
}

MemoryStats CachingAllocator::stats(int device) {
  SPMD_CHECK(device >= 0 && device < kMaxDevices, "CUDA allocator: bad device ", device);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.pools[device].stats;
}

void CachingAllocator::reset_peak(int device) {
  SPMD_CHECK(device >= 0 && device < kMaxDevices, "CUDA allocator: bad device ", device);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.pools[device].stats.peak_allocated = s.pools[device].stats.allocated;
}

void CachingAllocator::empty_cache() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  for (int d = 0; d < kMaxDevices; ++d) {
    DevicePool& pool = s.pools[d];
    if (pool.free.empty() && pool.parked.empty()) continue;
    collect_parked(pool, /*wait=*/true);
    release_cached(pool, d);
  }
}

}  // namespace spmd::cuda::detail
