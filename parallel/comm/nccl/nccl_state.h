// What the NCCL backend's two files (nccl_process_group.cpp, which issues the
// collectives, and nccl_watchdog.cpp, which watches them) share: the NCCL and
// CUDA handles, and the record of a collective queued on the GPU.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "parallel/comm/nccl/nccl_process_group.h"

namespace spmd::dist {

using Clock = std::chrono::steady_clock;

struct NcclProcessGroup::State {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;  // the communication stream
  float* barrier_buf = nullptr;   // one float on the device, all-reduced by barrier()
};

struct NcclProcessGroup::Pending {
  Work work;
  std::string description;
  uint64_t seq = 0;
  Clock::time_point start, deadline;
  std::vector<Tensor> tensors;  // alive until the GPU is done with them
  // Set by the host function queued behind the op, as its last action: from
  // then on the watchdog may drop this record (and free the tensors, which a
  // host function itself must not do: it may not call CUDA).
  std::atomic<bool> finished{false};
  bool announced = false;
};

// How long a collective may take before this rank records in the store that
// it arrived at it, so that a timed-out rank can name the ranks that never did.
inline std::chrono::milliseconds slow_after(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 8, std::chrono::milliseconds(50), std::chrono::milliseconds(2000));
}

}  // namespace spmd::dist
