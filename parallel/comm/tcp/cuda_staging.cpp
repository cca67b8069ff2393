// Pinned host staging and stream marks, on the CUDA runtime (compiled only
// in CUDA builds).
#include "parallel/comm/tcp/cuda_staging.h"

#include <cuda_runtime_api.h>

#include "runtime/error.h"
#include "tensor/cuda_api.h"

namespace spmd::dist::tcp {
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
  char* buffers[2] = {nullptr, nullptr};
  size_t sizes[2] = {0, 0};
  cudaStream_t stream = nullptr;  // the worker's copy stream
  int device = -1;
};

HostStaging::HostStaging() : impl_(std::make_unique<Impl>()) {}

HostStaging::~HostStaging() {
  for (char* b : impl_->buffers) {
    if (b) cudaFreeHost(b);
  }
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
}

char* HostStaging::buffer(int slot, size_t bytes) {
  if (bytes > impl_->sizes[slot]) {
    if (impl_->buffers[slot]) cudaFreeHost(impl_->buffers[slot]);
    impl_->buffers[slot] = nullptr;
    check(
        cudaHostAlloc(reinterpret_cast<void**>(&impl_->buffers[slot]), bytes, cudaHostAllocDefault),
        "cudaHostAlloc");
    impl_->sizes[slot] = bytes;
  }
  return impl_->buffers[slot];
}

// The worker's copy stream, on t's device.
static cudaStream_t copy_stream(HostStaging::Impl& impl, const Tensor& t) {
  const int device = t.device().index;
  check(cudaSetDevice(device), "cudaSetDevice");
  if (impl.device != device) {
    if (impl.stream) cudaStreamDestroy(impl.stream);
    impl.stream = nullptr;
    check(cudaStreamCreateWithFlags(&impl.stream, cudaStreamNonBlocking), "stream");
    impl.device = device;
  }
  return impl.stream;
}

void HostStaging::to_host(const Tensor& t, char* host) {
  cudaStream_t s = copy_stream(*impl_, t);
  check(cudaMemcpyAsync(host, t.raw_data(), t.nbytes(), cudaMemcpyDeviceToHost, s), "copy to host");
  check(cudaStreamSynchronize(s), "synchronize");
}

void HostStaging::to_device(const char* host, const Tensor& t) {
  cudaStream_t s = copy_stream(*impl_, t);
  check(cudaMemcpyAsync(t.raw_data(), host, t.nbytes(), cudaMemcpyHostToDevice, s),
        "copy to device");
  check(cudaStreamSynchronize(s), "synchronize");
}

}  // namespace spmd::dist::tcp
