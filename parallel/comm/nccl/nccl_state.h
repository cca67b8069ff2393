// What the NCCL backend's two files (nccl_process_group.cpp, which issues the
// collectives, and nccl_watchdog.cpp, which watches and completes them)
// share: the NCCL and CUDA handles, the record of a collective queued on the
// GPU, and the doorbell by which the GPU's host functions wake the watchdog.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/comm/nccl/nccl_process_group.h"

namespace spmd::dist {

using Clock = std::chrono::steady_clock;

// Wakes the watchdog as soon as a collective has finished on the GPU. Rung by
// the host function queued behind each collective, which runs on CUDA's
// callback thread and may neither call CUDA nor wait behind a thread that
// does: so `mu` is held only to set or read `rung`, never around a CUDA or
// NCCL call (the group's mu_ is, and a host function never takes it).
struct Doorbell {
  std::mutex mu;
  std::condition_variable cv;
  bool rung = false;

  void ring() {
    {
      std::lock_guard lock(mu);
      rung = true;
    }
    cv.notify_one();
  }
  // Returns once rung (and unrings it) or after `period`.
  void wait_for(std::chrono::milliseconds period) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, period, [&] { return rung; });
    rung = false;
  }
};

// Every use of `comm` (issuing, polling its error, aborting, destroying)
// happens with the group's mu_ held.
struct NcclProcessGroup::State {
  ncclComm_t comm = nullptr;      // null once aborted or destroyed
  cudaStream_t stream = nullptr;  // the communication stream
  float* barrier_buf = nullptr;   // one float on the device, all-reduced by barrier()
  std::shared_ptr<Doorbell> doorbell = std::make_shared<Doorbell>();
};

struct NcclProcessGroup::Pending {
  Work work;  // completed by the watchdog thread, never by the host function
  std::string description;
  uint64_t seq = 0;
  Clock::time_point start, deadline;
  std::vector<Tensor> tensors;  // alive until the GPU is done with them
  // Set by the host function queued behind the op once the op has run on
  // the stream; the watchdog then completes the Work (running its callbacks,
  // which may call CUDA) and drops this record (freeing the tensors).
  std::atomic<bool> finished{false};
  // Shared with the group, so a host function that runs after a shutdown
  // gave up on this record (and leaked it) still rings a live doorbell.
  std::shared_ptr<Doorbell> doorbell;
  bool announced = false;
  bool collective = false;  // not a send/recv batch: in the ledger (desync_check.h)
};

// How long a collective may take before this rank records in the store that
// it arrived at it, so that a timed-out rank can name the ranks that never did.
inline std::chrono::milliseconds slow_after(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 8, std::chrono::milliseconds(50), std::chrono::milliseconds(2000));
}

}  // namespace spmd::dist
