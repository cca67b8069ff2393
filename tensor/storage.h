// The bytes behind one or more tensors. A Storage owns a block on one device
// and frees it through the deleter it was given (the allocator's, or a
// caller's for memory spmd did not allocate). Views share a Storage through
// shared_ptr; the version counter is bumped by every in-place write, so
// autograd can tell when a tensor it saved for backward was overwritten.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>

#include "tensor/device.h"

namespace spmd {

// A pointer with the function that frees it.
using DataPtr = std::unique_ptr<void, std::function<void(void*)>>;

class Storage {
 public:
  Storage(DataPtr data, size_t nbytes, Device device)
      : data_(std::move(data)), nbytes_(nbytes), device_(device) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_.get(); }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  DataPtr data_;
  size_t nbytes_;
  Device device_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace spmd
