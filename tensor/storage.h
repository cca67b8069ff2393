// The bytes behind one or more tensors. A Storage owns a block on one device
// and frees it through the deleter it was given (the allocator's, or a
// caller's for memory spmd did not allocate). Views share a Storage through
// shared_ptr; the version counter is bumped by every in-place write, so
// autograd can tell when a tensor it saved for backward was overwritten.
//
// A Storage's bytes can be released and later replaced by another block of
// the same size (release_data / adopt_data), keeping the Storage, its views
// and its version: FSDP frees a gathered parameter between its forward and
// its backward while autograd still holds views of it for backward, and puts
// the re-gathered bytes back before backward reads them (PyTorch resizes the
// storage to 0 and back).
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
  bool is_released() const { return released_; }
  // Hands the bytes to the caller (who may free them); the storage holds none
  // until adopt_data(). REQUIRES: not released.
  DataPtr release_data() {
    released_ = true;
    return std::move(data_);
  }
  // Takes `data` as this storage's bytes. REQUIRES: a block of nbytes() on
  // device(), and the storage released.
  void adopt_data(DataPtr data) {
    data_ = std::move(data);
    released_ = false;
  }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // A meta storage becomes a real one: `data`, a block of nbytes() on
  // `device`, are its bytes from now on (every view of it sees them). A
  // released meta storage takes the device and stays released (pass a
  // null `data`). REQUIRES: device() is meta. tensor/deferred.h.
  void materialize(DataPtr data, Device device) {
    data_ = std::move(data);
    device_ = device;
  }

  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  DataPtr data_;
  size_t nbytes_;
  Device device_;
  bool released_ = false;
  std::atomic<uint64_t> version_{0};
};

}  // namespace spmd
