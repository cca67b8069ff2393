// The byte-range helpers the shared-memory collectives share
// (segment_all_reduce.h, segment_collectives.h, zero_copy.h): a copy that
// accepts an empty range, whose pointers may be null (an empty tensor), and
// whether two ranges overlap.
#pragma once

#include <cstddef>
#include <cstring>

namespace spmd::dist::shm {

// memcpy of `bytes` bytes; nothing (and null pointers allowed) when 0.
inline void copy_bytes(char* dst, const char* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte.
inline bool overlaps(const char* a, size_t a_bytes, const char* b, size_t b_bytes) {
  return a < b + b_bytes && b < a + a_bytes;
}

}  // namespace spmd::dist::shm
