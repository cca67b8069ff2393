// Host <-> device copies through pinned staging, and GPU-to-GPU copies
// (tensor/cuda/transfer.h).
#include "tensor/cuda/transfer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>

#include "kernels/cuda_check.h"
#include "kernels/elementwise.h"
#include "tensor/backend.h"
#include "tensor/cuda/allocator.h"
#include "tensor/cuda/context.h"
#include "tensor/cuda/index_errors.h"

namespace spmd::cuda::detail {
namespace {

// Two pinned buffers of kChunk bytes, shared by all devices and threads (one
// transfer at a time). done_[i] is the event of the last copy that used
// buffer i; reusing the buffer first waits for it.
class PinnedStaging {
 public:
  static constexpr size_t kChunk = size_t(8) << 20;

  static PinnedStaging& instance() {
    static PinnedStaging* staging = new PinnedStaging();  // never destroyed (see allocator)
    return *staging;
  }

  void to_device(char* dst, const char* src, size_t n, int device, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mu_);
    ensure_buffers();
    int i = 0;
    for (size_t off = 0; off < n; off += kChunk, i ^= 1) {
      const size_t len = std::min(kChunk, n - off);
      wait_buffer(i);
      std::memcpy(buf_[i], src + off, len);
      SPMD_CUDA_CHECK(cudaMemcpyAsync(dst + off, buf_[i], len, cudaMemcpyHostToDevice, stream));
      mark_buffer(i, device, stream);
    }
  }

  void to_host(char* dst, const char* src, size_t n, int device, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mu_);
    ensure_buffers();
    const size_t chunks = (n + kChunk - 1) / kChunk;
    auto issue = [&](size_t k) {
      const int i = int(k % 2);
      wait_buffer(i);
      SPMD_CUDA_CHECK(cudaMemcpyAsync(buf_[i], src + k * kChunk, std::min(kChunk, n - k * kChunk),
                                      cudaMemcpyDeviceToHost, stream));
      mark_buffer(i, device, stream);
    };
    if (chunks > 0) issue(0);
    for (size_t k = 0; k < chunks; ++k) {
      if (k + 1 < chunks) issue(k + 1);  // the engine moves chunk k+1 while we drain chunk k
      const int i = int(k % 2);
      wait_buffer(i);
      std::memcpy(dst + k * kChunk, buf_[i], std::min(kChunk, n - k * kChunk));
    }
  }

 private:
  static constexpr int kMaxDevices = 64;

  void ensure_buffers() {
    for (void*& b : buf_) {
      if (!b) SPMD_CUDA_CHECK(cudaHostAlloc(&b, kChunk, cudaHostAllocPortable));
    }
  }
  void wait_buffer(int i) {
    if (done_[i]) SPMD_CUDA_CHECK(cudaEventSynchronize(done_[i]));
  }
  // Records that buffer i is in use by the copy just queued on `stream`.
  void mark_buffer(int i, int device, cudaStream_t stream) {
    cudaEvent_t& e = events_[device][i];
    if (!e) SPMD_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    SPMD_CUDA_CHECK(cudaEventRecord(e, stream));
    done_[i] = e;
  }

  std::mutex mu_;
  void* buf_[2] = {nullptr, nullptr};
  cudaEvent_t done_[2] = {nullptr, nullptr};
  // Per device: an event can only be recorded on a stream of its own device.
  std::array<std::array<cudaEvent_t, 2>, kMaxDevices> events_{};
};

Tensor empty_on(Device device, const Shape& shape, DType dtype) {
  const size_t nbytes = size_t(shape.numel()) * element_size(dtype);
  Backend& be = backend_for(device);
  return Tensor(std::make_shared<Storage>(be.allocate(nbytes, device), nbytes, device), shape,
                contiguous_strides(shape), 0, dtype);
}

// `t` itself when it is contiguous with dtype `dtype`, else a contiguous
// converted copy made on t's device.
Tensor contiguous_as(const Tensor& t, DType dtype) {
  if (t.is_contiguous() && t.dtype() == dtype) return t;
  Tensor c = empty_on(t.device(), t.shape(), dtype);
  backend_for(t.device()).copy(t, c);
  return c;
}

bool direct(const Tensor& t, DType dtype) { return t.is_contiguous() && t.dtype() == dtype; }

}  // namespace

void copy_host_to_device(const Tensor& src, const Tensor& dst) {
  Launch launch(dst.device());
  const Tensor host = contiguous_as(src, src.dtype());
  const Tensor dev =
      direct(dst, src.dtype()) ? dst : empty_on(dst.device(), dst.shape(), src.dtype());
  PinnedStaging::instance().to_device(static_cast<char*>(dev.raw_data()),
                                      static_cast<const char*>(host.raw_data()), host.nbytes(),
                                      launch.device, launch.stream);
  if (!dev.is_same(dst)) kernels::copy(tensor_arg(dev), tensor_arg(dst), launch.stream);
}

void copy_device_to_host(const Tensor& src, const Tensor& dst) {
  Launch launch(src.device());
  Tensor dev = src;
  if (!direct(src, dst.dtype())) {
    dev = empty_on(src.device(), src.shape(), dst.dtype());
    kernels::copy(tensor_arg(src), tensor_arg(dev), launch.stream);
  }
  const Tensor host = dst.is_contiguous() ? dst : empty_on(Device::cpu(), dst.shape(), dst.dtype());
  PinnedStaging::instance().to_host(static_cast<char*>(host.raw_data()),
                                    static_cast<const char*>(dev.raw_data()), dev.nbytes(),
                                    launch.device, launch.stream);
  throw_index_errors(launch.device);  // the stream's work up to here has run
  if (!host.is_same(dst)) backend_for(Device::cpu()).copy(host, dst);
}

void copy_device_to_device(const Tensor& src, const Tensor& dst) {
  const int from = src.device().index, to = dst.device().index;
  const Tensor s = contiguous_as(src, src.dtype());
  const Tensor d =
      direct(dst, src.dtype()) ? dst : empty_on(dst.device(), dst.shape(), src.dtype());
  const cudaStream_t from_stream = current_stream_handle(from);
  Launch launch(dst.device());
  // The copy (on the destination's stream) waits for the source's work, and
  // the source's stream waits for the copy before it may reuse s's memory.
  cudaEvent_t ready = nullptr, copied = nullptr;
  {
    DeviceScope scope(from);
    SPMD_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    SPMD_CUDA_CHECK(cudaEventRecord(ready, from_stream));
  }
  SPMD_CUDA_CHECK(cudaStreamWaitEvent(launch.stream, ready, 0));
  SPMD_CUDA_CHECK(
      cudaMemcpyPeerAsync(d.raw_data(), to, s.raw_data(), from, s.nbytes(), launch.stream));
  SPMD_CUDA_CHECK(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming));
  SPMD_CUDA_CHECK(cudaEventRecord(copied, launch.stream));
  {
    DeviceScope scope(from);
    SPMD_CUDA_CHECK(cudaStreamWaitEvent(from_stream, copied, 0));
  }
  SPMD_CUDA_CHECK(cudaEventDestroy(ready));  // destruction waits for nothing; safe when queued
  SPMD_CUDA_CHECK(cudaEventDestroy(copied));
  if (!d.is_same(dst)) kernels::copy(tensor_arg(d), tensor_arg(dst), launch.stream);
}

}  // namespace spmd::cuda::detail
