// The GPU as the rest of spmd sees it, in every build: devices, the caching
// allocator's statistics, streams and events, and the TF32 switch. This is
// torch.cuda's surface (is_available, device_count, set_device,
// memory_allocated, Stream, Event, current_stream...) with no CUDA header, so
// the NCCL backend, DDP's overlap of communication with backward, and the
// benchmarks can order work across streams from any layer.
//
// In a build without CUDA, is_available() is false, device_count() is 0, and
// everything else throws an Error saying spmd was built without CUDA.
//
// Streams. Every op on a CUDA tensor is queued on the *current stream* of its
// device, a per-thread setting (the device's default stream until changed).
// Work on one stream runs in order; across streams, order comes only from
// events: `b.wait_stream(a)` makes work queued on b from now on wait for what
// was queued on a so far.
//
// Memory. CUDA tensors come from a caching allocator: freed blocks go back to
// a free list of their size class and stream instead of to cudaFree, so
// steady-state training calls cudaMalloc never. A block is reused only by
// work on the stream it was allocated on, without waiting; a tensor used on
// another stream must be marked with record_stream(), after which its block
// is reused only once that stream has passed the point of the free.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "tensor/device.h"
#include "tensor/tensor.h"

namespace spmd::cuda {

// True when spmd was built with CUDA and a GPU is present.
bool is_available();
int device_count();
// The calling thread's current device (the one "cuda" without an index means).
int current_device();
void set_device(int index);
// The device's name as CUDA reports it (-1: the current device), as
// torch.cuda.get_device_name: "NVIDIA H100 80GB HBM3".
std::string device_name(int device = -1);
// Blocks until all work queued on the device (-1: the current one) is done.
// Waiting for the GPU (this, Stream/Event::synchronize, a copy to the host)
// is also where an index out of range found by a CUDA op since the last
// wait is thrown (InvalidArgument naming the op): ops check indices on the
// GPU without waiting for the answer.
void synchronize(int device = -1);

// --- The caching allocator (-1: the current device) ----------------------------
size_t memory_allocated(int device = -1);      // bytes held by live tensors
size_t max_memory_allocated(int device = -1);  // the peak of memory_allocated
size_t memory_reserved(int device = -1);       // bytes cudaMalloc'ed: live + cached
void reset_peak_memory_stats(int device = -1);
// Returns every cached (unused) block of every device to CUDA.
void empty_cache();
// The device's free and total bytes, as CUDA sees them (cudaMemGetInfo:
// memory this process's allocator has cached counts as used).
struct MemInfo {
  size_t free = 0, total = 0;
};
MemInfo mem_get_info(int device = -1);

// --- Matrix products --------------------------------------------------------------
// Lets f32 matmuls use TF32 tensor cores (10-bit mantissa inputs, f32
// accumulation; ~1e-3 relative error). Off by default, as in PyTorch.
void set_allow_tf32(bool allow);
bool allow_tf32();

class Event;

// A queue of GPU work on one device. Copies share the queue (as in PyTorch);
// the last copy of a stream made by Stream::create destroys it, after
// waiting for its work.
class Stream {
 public:
  // A new stream on `device` (-1: current) that does not synchronize with the
  // default stream; high_priority for communication that should overtake compute.
  static Stream create(int device = -1, bool high_priority = false);
  // The device's default stream (the legacy NULL stream).
  static Stream default_stream(int device = -1);

  // The cudaStream_t, for code that calls CUDA or NCCL itself.
  void* handle() const;
  int device_index() const;
  Device device() const { return Device::cuda(device_index()); }
  void synchronize() const;  // blocks until all work queued so far is done
  bool query() const;        // true when all work queued so far is done
  // Work queued on this stream from now on waits for the event (for what
  // other's queue held when it was called).
  void wait_event(const Event& event) const;
  void wait_stream(const Stream& other) const;

  friend bool operator==(const Stream& a, const Stream& b) { return a.handle() == b.handle(); }

  // The state behind a stream is private to the CUDA build; streams come from
  // create(), default_stream() and current_stream().
  struct Impl;
  explicit Stream(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<Impl>& impl() const { return impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

// The calling thread's current stream of a device (-1: current device).
Stream current_stream(int device = -1);
// Makes `stream` the calling thread's current stream of its device.
void set_current_stream(const Stream& stream);

// Sets the current stream for a scope and restores the previous one after.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
};

// A marker in a stream's queue: recorded at a point, it completes when the
// work queued before that point has run.
class Event {
 public:
  // enable_timing: allow elapsed_ms (costs a little on record).
  explicit Event(bool enable_timing = false);

  void record();  // on the current stream of the current device
  void record(const Stream& stream);
  void synchronize() const;  // blocks until complete
  bool query() const;        // true when complete (or never recorded)
  // Milliseconds between this (earlier) event and `end`; both recorded with timing.
  float elapsed_ms(const Event& end) const;
  void* handle() const;  // the cudaEvent_t (null until first recorded)

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// Tells the allocator that `t`'s memory is used by work queued on `stream`,
// so that when the tensor is freed its block is not handed out again until
// `stream` has finished that work (torch's Tensor.record_stream).
void record_stream(const Tensor& t, const Stream& stream);

}  // namespace spmd::cuda
