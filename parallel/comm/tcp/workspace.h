// Workspace: the memory a group's algorithms borrow for one collective:
// staging slots that received chunks land in before they are reduced (kept
// small, so the chunk is still in cache when the reduction reads it), and a
// scratch buffer for partial results that must not overwrite a caller's input
// (reduce_scatter, reduce on a non-root rank). Used by one collective at a
// time (../host/collective_queue.h) and grown on demand, so steady-state collectives
// never allocate.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace spmd::dist::tcp {

class Workspace {
 public:
  // `slots` staging slots of `bytes` each; slot i starts at the returned
  // pointer + i * bytes. Valid until the next call.
  char* staging(size_t slots, size_t bytes) { return staging_.get(slots * bytes); }
  // A scratch buffer of at least `bytes`. Valid until the next call.
  char* scratch(size_t bytes) { return scratch_.get(bytes); }

 private:
  // A 64-byte aligned block that only grows.
  class Block {
   public:
    char* get(size_t bytes) {
      if (bytes > size_) {
        const size_t rounded = (bytes + 63) / 64 * 64;
        data_.reset(static_cast<char*>(std::aligned_alloc(64, rounded)));
        size_ = rounded;
      }
      return data_.get();
    }

   private:
    struct Free {
      void operator()(char* p) const { std::free(p); }
    };
    std::unique_ptr<char, Free> data_;
    size_t size_ = 0;
  };
  Block staging_, scratch_;
};

}  // namespace spmd::dist::tcp
