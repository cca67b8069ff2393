// A copy with non-temporal stores, for the zero-copy collectives' large
// copies (zero_copy.h): the stores skip reading each destination line into
// the cache before overwriting it, and leave the cache to what is read next.
// glibc's memcpy streams only above 114 MiB on the Xeon of docs/measurements/shm.md;
// there one core alone copied 1.3-1.6x memcpy's bandwidth so from 4 to 16
// MiB. Where the core has AVX-512 (asked at run time) each store writes a
// whole cache line, which beat four 16-byte SSE2 stores a line by 1.2x on a
// 64 MiB all_gather; else SSE2, else memcpy.
//
// The stores are weakly ordered: the copy ends with an sfence, so that the
// barrier that publishes it (a release store) comes after every byte.
#pragma once

#include <cstddef>

namespace spmd::dist::shm {

// memcpy of `bytes` bytes (any alignment, any length, 0 included) with
// non-temporal stores, fenced.
void stream_copy(char* dst, const char* src, size_t bytes);

}  // namespace spmd::dist::shm
