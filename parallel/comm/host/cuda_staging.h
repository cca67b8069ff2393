// Host staging of CUDA tensors for the host backend (CUDA builds only). The
// backend moves bytes with sendmsg/recvmsg, which need host memory, so an
// operation on a CUDA tensor, collective or send/recv, runs on a pinned host
// copy, the same way for both:
//
//   at the call (caller's thread):  mark the caller's current stream (an event);
//                   take pinned buffers from the group's HostStaging
//   where it runs (a collective: its waiter, else the queue's worker; a send:
//   the call itself; a recv: the thread that completes it):
//                   wait for the mark; copy device -> pinned host (what is read);
//                   move the bytes on the host copy;
//                   copy pinned host -> device (what is written); then
//                   complete the Work, and the buffers go back to the pool.
//
// Pinned (page-locked) memory makes the copies DMA transfers at full PCIe or
// NVLink-C2C speed. The pool keeps the buffers for later operations: as many
// as were ever in use at once (a collective holds two while it runs, each
// send or recv in flight one).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "tensor/tensor.h"

namespace spmd::dist::host {

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

// A handle to a group's pool of pinned buffers and its copy stream; copies of
// the handle share them. Thread-safe: collectives and send/recv stage from
// different threads.
class HostStaging {
 public:
  HostStaging();

  // Pinned host memory of at least `bytes`, for one operation: it goes back
  // to the pool when the last copy of the pointer is dropped.
  std::shared_ptr<char> acquire(size_t bytes);
  // Copies a CUDA tensor's bytes to host memory, or back; both block until done.
  void to_host(const Tensor& t, char* host);
  void to_device(const char* host, const Tensor& t);

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace spmd::dist::host
