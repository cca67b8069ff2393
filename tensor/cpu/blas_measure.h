// How blas.cpp finds the fastest OpenBLAS core: the timing of candidate
// cores on a training step's GEMM shapes, and the per-machine file that
// keeps the result so later processes skip the timing. Internal to the CPU
// backend (blas.h is the contract).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tensor/cpu/blas.h"

namespace spmd::cpu {

// Times each of `cores` (made current by select(core), which returns false
// when the core did not take) on one thread: three rounds, the cores
// interleaved within each round, each round the three products of an MLP's
// forward and backward at a small model's shapes (1024 tokens, C 384, 4C
// 1536). A core's rate is its median over the rounds. Returns the cores that
// took, fastest first. Leaves whichever core ran last current.
std::vector<CoreRate> measure_cores(const std::vector<std::string>& cores,
                                    const std::function<bool(const std::string&)>& select);

// The file a machine's result is kept in: $SPMD_CACHE_DIR, else
// $XDG_CACHE_HOME/spmd, else $HOME/.cache/spmd, named by a hash of `key`.
// "" when none of the three is set.
std::string core_cache_path(const std::string& key);

// The rates kept for `key` at `path`, or nullopt (with *why set) when the
// file is missing, unreadable, written for another key, or malformed.
std::optional<std::vector<CoreRate>> read_core_cache(const std::string& path,
                                                     const std::string& key, std::string* why);

// Writes the rates for `key` to `path`: a temporary file, flushed and synced,
// renamed over the old one, then read back and compared. Returns "" on
// success, else why it was not kept.
std::string write_core_cache(const std::string& path, const std::string& key,
                             const std::vector<CoreRate>& rates);

// Holds an exclusive lock on `path`.lock while one process measures, so the
// ranks spmdrun starts at once do not time the cores against each other:
// the first measures, the others wait (up to `timeout_s`) and read its file.
class CoreCacheLock {
 public:
  CoreCacheLock(const std::string& path, double timeout_s);
  ~CoreCacheLock();
  CoreCacheLock(const CoreCacheLock&) = delete;
  CoreCacheLock& operator=(const CoreCacheLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace spmd::cpu
