// What the meta device would have held: every meta allocation is counted
// (bytes live now, their peak), not made. A meta block's pointer is a token,
// distinct per allocation and never read (the meta backend reads nothing),
// so that freeing it is seen as well: the counts go down when the last view
// of a storage goes, when FSDP releases a gathered parameter, or when a
// storage is materialized.
//
// A dry run (train/dry_run.h) reads these while one step runs on meta
// tensors: a log of the step's allocations and frees, replayed with the
// blocks of the parameters, gradients and optimizer state left out, gives
// the peak of everything else (activations, gathered units, temporaries).
//
// Also here: the stand-in for a meta tensor's values, which a dry run reads
// where real code reads a value to decide something (a loss for the log, a
// norm, a check that the ranks agree): zeros, while a MetaReadsAsZeros lives.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "tensor/storage.h"

namespace spmd {

struct MetaMemoryStats {
  uint64_t allocated = 0;    // bytes live now
  uint64_t peak = 0;         // the most live at once since the last reset
  uint64_t allocations = 0;  // blocks allocated so far
};
MetaMemoryStats meta_memory_stats();
// Sets the peak to the bytes live now.
void reset_meta_peak_memory();

// A block of `nbytes` on the meta device: a token, counted until freed.
DataPtr meta_allocate(size_t nbytes);

// The block behind a meta storage (its token's number), or 0 when the
// storage is not on meta or holds no block (released).
uint64_t meta_block_id(const Storage& storage);

// One allocation (bytes > 0) or free (bytes < 0) of meta block `block`.
struct MetaEvent {
  uint64_t block = 0;
  int64_t bytes = 0;
};

// The meta allocations and frees made while it lives, from any thread, in
// order. At most one lives at a time (checked).
class MetaAllocationLog {
 public:
  MetaAllocationLog();
  ~MetaAllocationLog();
  MetaAllocationLog(const MetaAllocationLog&) = delete;
  MetaAllocationLog& operator=(const MetaAllocationLog&) = delete;

  std::vector<MetaEvent> events() const;
  // How many events so far: a mark between two phases of what is logged.
  size_t size() const;
  // The most bytes live at once among the blocks allocated while logging,
  // leaving out the blocks in `excluded`: the events replayed in order, the
  // peak taken over events [from, to) (every event by default).
  uint64_t peak_excluding(const std::unordered_set<uint64_t>& excluded, size_t from = 0,
                          size_t to = SIZE_MAX) const;
};

// While one lives on this thread, a meta tensor's values copied out of it
// (item(), to_vector(), a copy to the CPU) read as zeros instead of
// throwing. For a dry run only: the values are stand-ins, so what they
// decide must not depend on them (docs/dry_run.md). Its
// presence also marks a dry run's scope: FSDP then runs a unit whose
// shards stay on meta, which elsewhere it refuses as never materialized.
class MetaReadsAsZeros {
 public:
  MetaReadsAsZeros();
  ~MetaReadsAsZeros();
  MetaReadsAsZeros(const MetaReadsAsZeros&) = delete;
  MetaReadsAsZeros& operator=(const MetaReadsAsZeros&) = delete;
  // Whether one lives on this thread.
  static bool active();
};

}  // namespace spmd
