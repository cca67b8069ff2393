// Index range checks on the GPU and their deferred errors
// (tensor/cuda/index_errors.h). Per device: a claim word in device memory
// (the first failing check takes it with an atomic), a record in mapped
// pinned memory that the claiming thread fills and the host reads in place,
// and the ids, ops and sizes of the most recent checks, to name the op.
#include "tensor/cuda/index_errors.h"

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

#include "kernels/cuda_check.h"
#include "kernels/indexing.h"

namespace spmd::cuda::detail {
namespace {

constexpr int kMaxDevices = 64;
constexpr int64_t kRemembered = 4096;  // checks whose op is still known when an error shows up

struct CheckInfo {
  int64_t id = 0;
  const char* op = nullptr;
  int64_t size = 0;
};

struct DeviceRecord {
  std::mutex mu;
  int* claim = nullptr;                             // device memory, 0 while the record is free
  kernels::IndexRangeError* host = nullptr;         // mapped pinned memory
  kernels::IndexRangeError* device_view = nullptr;  // its address on the device
  int64_t next_id = 1;
  std::array<CheckInfo, kRemembered> recent{};
};

DeviceRecord& record_for(int device) {
  SPMD_CHECK(device >= 0 && device < kMaxDevices, "cuda: bad device ", device);
  static auto* records = new std::array<DeviceRecord, kMaxDevices>();  // never destroyed
  return (*records)[device];
}

// Allocates the claim word and the record on first use. REQUIRES: r.mu held.
void ensure_allocated(DeviceRecord& r, int device) {
  if (r.host) return;
  DeviceScope scope(device);
  void* host = nullptr;
  SPMD_CUDA_CHECK(cudaHostAlloc(&host, sizeof(kernels::IndexRangeError),
                                cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(host, 0, sizeof(kernels::IndexRangeError));
  void* view = nullptr;
  SPMD_CUDA_CHECK(cudaHostGetDevicePointer(&view, host, 0));
  void* claim = nullptr;
  SPMD_CUDA_CHECK(cudaMalloc(&claim, sizeof(int)));
  r.claim = static_cast<int*>(claim);
  SPMD_CUDA_CHECK(cudaMemset(r.claim, 0, sizeof(int)));
  SPMD_CUDA_CHECK(cudaDeviceSynchronize());  // once per device: every stream sees the 0
  r.device_view = static_cast<kernels::IndexRangeError*>(view);
  r.host = static_cast<kernels::IndexRangeError*>(host);
}

}  // namespace

void check_indices(const Launch& launch, const Tensor& index, int64_t size, const char* op,
                   bool has_ignore, int64_t ignore) {
  if (index.numel() == 0) return;
  DeviceRecord& r = record_for(launch.device);
  int64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    ensure_allocated(r, launch.device);
    id = r.next_id++;
    r.recent[size_t(id % kRemembered)] = {id, op, size};
  }
  AllocatorScratch scratch(launch.device, launch.stream);
  kernels::check_index_range(tensor_arg(index), size, has_ignore, ignore, id, r.claim,
                             r.device_view, scratch, launch.stream);
}

void throw_index_errors(int device) {
  DeviceRecord& r = record_for(device);
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.host) return;  // no check ever ran on this device
  volatile kernels::IndexRangeError* found = r.host;
  const int64_t id = found->check;
  if (id == 0) return;
  std::atomic_thread_fence(std::memory_order_acquire);  // the id was written last
  const int64_t position = found->position, value = found->value;
  const CheckInfo info = r.recent[size_t(id % kRemembered)];
  // Free the record for the next error before reporting this one.
  found->check = 0;
  {
    DeviceScope scope(device);
    SPMD_CUDA_CHECK(cudaMemset(r.claim, 0, sizeof(int)));
    SPMD_CUDA_CHECK(cudaDeviceSynchronize());
  }
  const bool known = info.id == id;
  SPMD_THROW(InvalidArgument, known ? info.op : "an indexing op", ": index ", value,
             " at position ", position, " is out of range",
             known ? " for size " + std::to_string(info.size) : std::string(),
             " (found on cuda:", device,
             "; CUDA ops check indices on the GPU and report a bad one at the next wait for the "
             "device, so results computed since that op are not valid)");
}

}  // namespace spmd::cuda::detail
