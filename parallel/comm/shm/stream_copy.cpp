// The non-temporal copy (see the header): AVX-512 where the core has it,
// else SSE2, else memcpy; unaligned heads and tails by memcpy.
#include "parallel/comm/shm/stream_copy.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "parallel/comm/shm/byte_ranges.h"

namespace spmd::dist::shm {
namespace {

#if defined(__x86_64__)
__attribute__((target("avx512f"))) void stream_copy_avx512(char* dst, const char* src,
                                                           size_t bytes) {
  const size_t head = std::min(bytes, (64 - uintptr_t(dst) % 64) % 64);  // to a line's start
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_loadu_si512(src + i));
  }
  std::memcpy(dst + i, src + i, bytes - i);
  _mm_sfence();
}
#endif

}  // namespace

void stream_copy(char* dst, const char* src, size_t bytes) {
  if (bytes == 0) return;  // the pointers may be null (an empty range)
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return stream_copy_avx512(dst, src, bytes);
#endif
#if defined(__SSE2__)
  const size_t head = std::min(bytes, (16 - uintptr_t(dst) % 16) % 16);  // to a 16-byte boundary
  std::memcpy(dst, src, head);
  size_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  std::memcpy(dst + i, src + i, bytes - i);
  _mm_sfence();
#else
  copy_bytes(dst, src, bytes);
#endif
}

}  // namespace spmd::dist::shm
