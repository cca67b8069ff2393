// tensor/cuda_api.h in a CUDA build: devices, allocator statistics, the
// TF32 switch, streams, events, and each thread's current stream per device.
#include "tensor/cuda_api.h"

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>

#include "kernels/cuda_check.h"
#include "tensor/cuda/allocator.h"
#include "tensor/cuda/context.h"
#include "tensor/cuda/index_errors.h"

namespace spmd::cuda {

struct Stream::Impl {
  cudaStream_t handle = nullptr;  // null: the device's default stream
  int device = 0;
  bool owned = false;  // made by Stream::create: destroyed with the last copy

  ~Impl() {
    if (!owned) return;
    int previous = -1;
    (void)cudaGetDevice(&previous);
    (void)cudaSetDevice(device);
    (void)cudaStreamSynchronize(handle);  // a block freed to it may be reused once it is gone
    (void)cudaStreamDestroy(handle);
    if (previous >= 0) (void)cudaSetDevice(previous);
  }
};

struct Event::Impl {
  cudaEvent_t event = nullptr;  // created at the first record, on the stream's device
  bool timing = false;
  int device = -1;

  ~Impl() {
    if (event) (void)cudaEventDestroy(event);
  }
};

namespace {

constexpr int kMaxDevices = 64;
std::atomic<bool> g_allow_tf32{false};

// The calling thread's current stream per device; null means the default stream.
thread_local std::array<std::shared_ptr<Stream::Impl>, kMaxDevices> t_current;

int resolve(int device) {
  const int d = device < 0 ? current_device() : device;
  SPMD_CHECK(d >= 0 && d < device_count(), "cuda: device ", d, " does not exist (", device_count(),
             " visible)");
  return d;
}

}  // namespace

// --- Devices ------------------------------------------------------------------------

int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // no driver or no GPU: not an error, just none
      n = 0;
    }
    return n;
  }();
  return count;
}

bool is_available() { return device_count() > 0; }

int current_device() {
  SPMD_CHECK(is_available(), "cuda: no GPU is available");
  int d = 0;
  SPMD_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int index) { SPMD_CUDA_CHECK(cudaSetDevice(resolve(index))); }

std::string device_name(int device) {
  cudaDeviceProp prop{};
  SPMD_CUDA_CHECK(cudaGetDeviceProperties(&prop, resolve(device)));
  return prop.name;
}

void synchronize(int device) {
  const int d = resolve(device);
  detail::DeviceScope scope(d);
  SPMD_CUDA_CHECK(cudaDeviceSynchronize());
  detail::throw_index_errors(d);
}

// --- Allocator statistics -------------------------------------------------------------

size_t memory_allocated(int device) {
  return detail::CachingAllocator::instance().stats(resolve(device)).allocated;
}
size_t max_memory_allocated(int device) {
  return detail::CachingAllocator::instance().stats(resolve(device)).peak_allocated;
}
size_t memory_reserved(int device) {
  return detail::CachingAllocator::instance().stats(resolve(device)).reserved;
}
void reset_peak_memory_stats(int device) {
  detail::CachingAllocator::instance().reset_peak(resolve(device));
}
void empty_cache() { detail::CachingAllocator::instance().empty_cache(); }
MemInfo mem_get_info(int device) {
  detail::DeviceScope scope(resolve(device));
  MemInfo info;
  SPMD_CUDA_CHECK(cudaMemGetInfo(&info.free, &info.total));
  return info;
}

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }

// --- Streams --------------------------------------------------------------------------

Stream Stream::create(int device, bool high_priority) {
  auto impl = std::make_shared<Impl>();
  impl->device = resolve(device);
  detail::DeviceScope scope(impl->device);
  int least = 0, greatest = 0;
  SPMD_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  SPMD_CUDA_CHECK(cudaStreamCreateWithPriority(&impl->handle, cudaStreamNonBlocking,
                                               high_priority ? greatest : least));
  impl->owned = true;
  return Stream(std::move(impl));
}

Stream Stream::default_stream(int device) {
  auto impl = std::make_shared<Impl>();
  impl->device = resolve(device);
  return Stream(std::move(impl));
}

void* Stream::handle() const { return impl_->handle; }
int Stream::device_index() const { return impl_->device; }

void Stream::synchronize() const {
  detail::DeviceScope scope(impl_->device);
  SPMD_CUDA_CHECK(cudaStreamSynchronize(impl_->handle));
  detail::throw_index_errors(impl_->device);
}

bool Stream::query() const {
  detail::DeviceScope scope(impl_->device);
  const cudaError_t err = cudaStreamQuery(impl_->handle);
  if (err == cudaErrorNotReady) return false;
  SPMD_CUDA_CHECK(err);
  return true;
}

void Stream::wait_event(const Event& event) const {
  if (!event.handle()) return;  // never recorded: nothing to wait for
  detail::DeviceScope scope(impl_->device);
  SPMD_CUDA_CHECK(cudaStreamWaitEvent(impl_->handle, static_cast<cudaEvent_t>(event.handle()), 0));
}

void Stream::wait_stream(const Stream& other) const {
  if (other == *this && other.device_index() == device_index()) return;
  Event e;
  e.record(other);
  wait_event(e);
}

Stream current_stream(int device) {
  const int d = resolve(device);
  if (t_current[d]) return Stream(t_current[d]);
  return Stream::default_stream(d);
}

void set_current_stream(const Stream& stream) {
  const int d = stream.device_index();
  t_current[d] = stream.handle() ? stream.impl() : nullptr;
}

StreamGuard::StreamGuard(const Stream& stream) : previous_(current_stream(stream.device_index())) {
  set_current_stream(stream);
}
StreamGuard::~StreamGuard() { set_current_stream(previous_); }

// --- Events -----------------------------------------------------------------------------

Event::Event(bool enable_timing) : impl_(std::make_shared<Impl>()) {
  SPMD_CHECK(is_available(), "cuda::Event: no GPU is available");
  impl_->timing = enable_timing;
}

void Event::record() { record(current_stream()); }

void Event::record(const Stream& stream) {
  detail::DeviceScope scope(stream.device_index());
  if (!impl_->event) {
    SPMD_CUDA_CHECK(cudaEventCreateWithFlags(
        &impl_->event, impl_->timing ? cudaEventDefault : cudaEventDisableTiming));
    impl_->device = stream.device_index();
  }
  SPMD_CHECK(impl_->device == stream.device_index(),
             "Event::record: an event of cuda:", impl_->device,
             " recorded on a stream of cuda:", stream.device_index());
  SPMD_CUDA_CHECK(cudaEventRecord(impl_->event, static_cast<cudaStream_t>(stream.handle())));
}

void Event::synchronize() const {
  if (!impl_->event) return;
  SPMD_CUDA_CHECK(cudaEventSynchronize(impl_->event));
  detail::throw_index_errors(impl_->device);
}

bool Event::query() const {
  if (!impl_->event) return true;
  const cudaError_t err = cudaEventQuery(impl_->event);
  if (err == cudaErrorNotReady) return false;
  SPMD_CUDA_CHECK(err);
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  SPMD_CHECK(impl_->event && end.impl_->event, "Event::elapsed_ms: both events must be recorded");
  SPMD_CHECK(impl_->timing && end.impl_->timing,
             "Event::elapsed_ms: both events must be made with enable_timing = true");
  float ms = 0;
  SPMD_CUDA_CHECK(cudaEventElapsedTime(&ms, impl_->event, end.impl_->event));
  return ms;
}

void* Event::handle() const { return impl_->event; }

void record_stream(const Tensor& t, const Stream& stream) {
  SPMD_CHECK(t.defined() && t.is_cuda(), "record_stream: expected a CUDA tensor");
  SPMD_CHECK(t.device().index == stream.device_index(), "record_stream: a tensor on ", t.device(),
             " and a stream of cuda:", stream.device_index());
  detail::CachingAllocator::instance().record_stream(t.storage()->data(), stream);
}

}  // namespace spmd::cuda

namespace spmd::cuda::detail {

cudaStream_t current_stream_handle(int device) {
  const auto& impl = t_current[device];
  return impl ? impl->handle : nullptr;
}

}  // namespace spmd::cuda::detail
