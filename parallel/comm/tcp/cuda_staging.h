// Host staging of CUDA tensors for the TCP backend (CUDA builds only). The
// TCP backend moves bytes with sendmsg/recvmsg, which need host memory, so a
// collective on a CUDA tensor runs on a pinned host copy:
//
//   at the call (caller's thread):  mark the caller's current stream (an event)
//   on the thread that runs it (its waiter, else the queue's worker):
//                   wait for the mark; copy device -> pinned host;
//                   run the collective on the host copy;
//                   copy pinned host -> device; then complete the Work.
//
// Pinned (page-locked) memory makes the copies DMA transfers at full PCIe or
// NVLink-C2C speed; the buffers are kept per group and only grow.
#pragma once

#include <cstddef>
#include <memory>

#include "tensor/tensor.h"

namespace spmd::dist::tcp {

// A point in the caller's stream that the thread running the collective waits
// for before reading a tensor (taken at issue time, when the caller's work so
// far is queued).
class StreamMark {
 public:
  // Records on the current stream of t's device.
  explicit StreamMark(const Tensor& t);
  ~StreamMark();
  StreamMark(StreamMark&&) noexcept;
  StreamMark& operator=(StreamMark&&) noexcept;
  // Blocks (sleeping) until the marked work is done.
  void wait() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class HostStaging {
 public:
  HostStaging();
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // Pinned host memory for buffer `slot` (0 or 1), at least `bytes`.
  char* buffer(int slot, size_t bytes);
  // Copies a CUDA tensor's bytes to host memory, or back; both block until done.
  void to_host(const Tensor& t, char* host);
  void to_device(const char* host, const Tensor& t);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace spmd::dist::tcp
