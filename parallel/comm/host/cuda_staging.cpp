// Pinned host staging and stream marks, on the CUDA runtime (compiled only
// in CUDA builds).
#include "parallel/comm/host/cuda_staging.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "runtime/error.h"
#include "tensor/cuda_api.h"

namespace spmd::dist::host {

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    SPMD_THROW(CommError, "tcp backend, CUDA staging: ", what, ": ", cudaGetErrorString(e));
}
}  // namespace

struct StreamMark::Impl {
  cudaEvent_t event = nullptr;
};

StreamMark::StreamMark(const Tensor& t) : impl_(std::make_unique<Impl>()) {
  const int device = t.device().index;
  check(cudaSetDevice(device), "cudaSetDevice");
  // A blocking-sync event: waiting on it sleeps instead of spinning.
  check(cudaEventCreateWithFlags(&impl_->event, cudaEventDisableTiming | cudaEventBlockingSync),
        "cudaEventCreate");
  auto stream = static_cast<cudaStream_t>(cuda::current_stream(device).handle());
  check(cudaEventRecord(impl_->event, stream), "cudaEventRecord");
}

StreamMark::~StreamMark() {
  if (impl_ && impl_->event) cudaEventDestroy(impl_->event);
}
StreamMark::StreamMark(StreamMark&&) noexcept = default;
StreamMark& StreamMark::operator=(StreamMark&&) noexcept = default;

void StreamMark::wait() const { check(cudaEventSynchronize(impl_->event), "cudaEventSynchronize"); }

struct HostStaging::Impl {
  std::mutex mu;
  std::vector<std::pair<char*, size_t>> free;  // pinned buffers not in use, and their sizes
  cudaStream_t stream = nullptr;               // the copy stream
  int device = -1;

  ~Impl() {
    for (auto& [b, size] : free) cudaFreeHost(b);
    if (stream) cudaStreamDestroy(stream);
  }
  // The copy stream, on t's device. REQUIRES: mu held.
  cudaStream_t copy_stream(const Tensor& t) {
    const int d = t.device().index;
    check(cudaSetDevice(d), "cudaSetDevice");
    if (device != d) {
      if (stream) cudaStreamDestroy(stream);
      stream = nullptr;
      check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
      device = d;
    }
    return stream;
  }
};

HostStaging::HostStaging() : impl_(std::make_shared<Impl>()) {}

// The smallest free buffer that holds `bytes`, else a new one (in place of
// the largest free one, too small, so the pool does not grow past the
// number of buffers in use at once).
std::shared_ptr<char> HostStaging::acquire(size_t bytes) {
  std::lock_guard lock(impl_->mu);
  auto& free = impl_->free;
  size_t best = free.size();
  for (size_t i = 0; i < free.size(); ++i)
    if (free[i].second >= bytes && (best == free.size() || free[i].second < free[best].second))
      best = i;
  std::pair<char*, size_t> buffer;
  if (best < free.size()) {
    buffer = free[best];
    free.erase(free.begin() + std::ptrdiff_t(best));
  } else {
    if (!free.empty()) {
      auto largest = std::max_element(free.begin(), free.end(),
                                      [](auto& a, auto& b) { return a.second < b.second; });
      cudaFreeHost(largest->first);
      free.erase(largest);
    }
    void* p = nullptr;
    check(cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault), "cudaHostAlloc");
    buffer = {static_cast<char*>(p), bytes};
  }
  return std::shared_ptr<char>(buffer.first, [impl = impl_, size = buffer.second](char* b) {
    std::lock_guard lock(impl->mu);
    impl->free.emplace_back(b, size);
  });
}

void HostStaging::to_host(const Tensor& t, char* host) {
  std::lock_guard lock(impl_->mu);
  cudaStream_t s = impl_->copy_stream(t);
  check(cudaMemcpyAsync(host, t.raw_data(), t.nbytes(), cudaMemcpyDeviceToHost, s), "copy to host");
  check(cudaStreamSynchronize(s), "synchronize");
}

void HostStaging::to_device(const char* host, const Tensor& t) {
  std::lock_guard lock(impl_->mu);
  cudaStream_t s = impl_->copy_stream(t);
  check(cudaMemcpyAsync(t.raw_data(), host, t.nbytes(), cudaMemcpyHostToDevice, s),
        "copy to device");
  check(cudaStreamSynchronize(s), "synchronize");
}

}  // namespace spmd::dist::host
