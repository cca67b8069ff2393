// The meta device's counts (meta_memory.h): atomics for the bytes live and
// their peak, a mutex for the log, which only a dry run keeps.
#include "tensor/meta_memory.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>

#include "runtime/error.h"

namespace spmd {
namespace {

// A token is the block's number times this: non-null, never dereferenced.
constexpr uintptr_t kTokenStride = 64;

std::atomic<uint64_t> g_allocated{0}, g_peak{0}, g_allocations{0};
std::mutex g_log_mu;
std::vector<MetaEvent>* g_log = nullptr;  // the live MetaAllocationLog's events
thread_local int t_reads_as_zeros = 0;

void note(uint64_t block, int64_t bytes) {
  std::lock_guard lock(g_log_mu);
  if (g_log) g_log->push_back({block, bytes});
}

void free_block(void* token, size_t nbytes) {
  g_allocated.fetch_sub(nbytes, std::memory_order_relaxed);
  note(uint64_t(reinterpret_cast<uintptr_t>(token) / kTokenStride), -int64_t(nbytes));
}

}  // namespace

MetaMemoryStats meta_memory_stats() {
  return {g_allocated.load(), g_peak.load(), g_allocations.load()};
}

void reset_meta_peak_memory() { g_peak.store(g_allocated.load()); }

DataPtr meta_allocate(size_t nbytes) {
  const uint64_t block = g_allocations.fetch_add(1) + 1;
  const uint64_t now = g_allocated.fetch_add(nbytes) + nbytes;
  uint64_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
  note(block, int64_t(nbytes));
  void* token = reinterpret_cast<void*>(uintptr_t(block) * kTokenStride);
  return DataPtr(token, [nbytes](void* p) { free_block(p, nbytes); });
}

uint64_t meta_block_id(const Storage& storage) {
  if (!storage.device().is_meta() || storage.is_released()) return 0;
  return uint64_t(reinterpret_cast<uintptr_t>(storage.data()) / kTokenStride);
}

MetaAllocationLog::MetaAllocationLog() {
  std::lock_guard lock(g_log_mu);
  SPMD_CHECK(g_log == nullptr, "MetaAllocationLog: another one is already logging");
  g_log = new std::vector<MetaEvent>();
}

MetaAllocationLog::~MetaAllocationLog() {
  std::lock_guard lock(g_log_mu);
  delete g_log;
  g_log = nullptr;
}

std::vector<MetaEvent> MetaAllocationLog::events() const {
  std::lock_guard lock(g_log_mu);
  return *g_log;
}

size_t MetaAllocationLog::size() const {
  std::lock_guard lock(g_log_mu);
  return g_log->size();
}

uint64_t MetaAllocationLog::peak_excluding(const std::unordered_set<uint64_t>& excluded,
                                           size_t from, size_t to) const {
  std::unordered_set<uint64_t> logged;  // allocated while logging: a free of another is not ours
  const std::vector<MetaEvent> all = events();
  int64_t live = 0, peak = 0;
  for (size_t i = 0; i < all.size() && i < to; ++i) {
    const MetaEvent& e = all[i];
    if (excluded.count(e.block)) continue;
    if (e.bytes > 0) {
      logged.insert(e.block);
    } else if (!logged.erase(e.block)) {
      continue;
    }
    live += e.bytes;
    if (i + 1 >= from) peak = std::max(peak, live);
  }
  return uint64_t(peak);
}

MetaReadsAsZeros::MetaReadsAsZeros() { ++t_reads_as_zeros; }
MetaReadsAsZeros::~MetaReadsAsZeros() { --t_reads_as_zeros; }
bool MetaReadsAsZeros::active() { return t_reads_as_zeros > 0; }

}  // namespace spmd
