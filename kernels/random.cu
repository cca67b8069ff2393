// Philox random numbers on the GPU (kernels/random.h, tensor/random.h).
#include "kernels/device.cuh"
#include "kernels/random.h"

namespace spmd::kernels {
namespace {

// Philox-4x32-10 (Salmon et al., SC'11): ten rounds of two 32x32->64-bit
// multiplies, the key bumped by the Weyl constants between rounds.
__device__ __forceinline__ uint4 philox4x32(uint64_t key, uint64_t counter_lo,
                                            uint64_t counter_hi) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  uint32_t c0 = uint32_t(counter_lo), c1 = uint32_t(counter_lo >> 32);
  uint32_t c2 = uint32_t(counter_hi), c3 = uint32_t(counter_hi >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const uint32_t hi0 = __umulhi(kM0, c0), lo0 = kM0 * c0;
    const uint32_t hi1 = __umulhi(kM1, c2), lo1 = kM1 * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  return make_uint4(c0, c1, c2, c3);
}

// (r >> 8) * 2^-24: 24 random bits, exact in f32.
__device__ __forceinline__ float unit_float(uint32_t r) {
  return __fmul_rn(float(r >> 8), 5.9604644775390625e-08f);
}

// A value in [low, high) from the draw's top 24 bits (double too): low +
// span u as one fused multiply-add, as tensor/cpu/random.cpp computes it.
template <class T>
__device__ __forceinline__ T uniform_value(uint32_t r, double low, double high) {
  if constexpr (std::is_same_v<T, double>) {
    const double u = double(r >> 8) * 5.9604644775390625e-08;
    return __fma_rn(high - low, u, low);
  } else {
    const float lo = float(low), span = float(high - low);
    return convert<T>(__fmaf_rn(span, unit_float(r), lo));
  }
}

// Box-Muller on the pair (a, b): u1 in (0, 1], u2 in [0, 1).
__device__ __forceinline__ float2 box_muller(uint32_t a, uint32_t b) {
  const float u1 = __fadd_rn(unit_float(a), 2.98023223876953125e-08f);  // + 2^-25: never 0
  const float u2 = unit_float(b);
  const float rad = sqrtf(__fmul_rn(-2.0f, logf(u1)));
  const float theta = __fmul_rn(6.28318530717958647692f, u2);
  return make_float2(__fmul_rn(rad, cosf(theta)), __fmul_rn(rad, sinf(theta)));
}

// Fills out[0, n) four elements per Philox block: block b (counter offset + b)
// gives elements 4b .. 4b+3, as draw(r, v) turns its four words into four
// values. Threads stride over the blocks; the last block stores only what
// lies below n.
template <class T, class Draw>
__device__ __forceinline__ void fill_by_blocks(T* out, int64_t n, uint64_t seed, uint64_t offset,
                                               Draw draw) {
  const int64_t blocks = (n + 3) / 4;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += stride) {
    T v[4];
    draw(philox4x32(seed, offset + uint64_t(b), 0), v);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (4 * b + k < n) out[4 * b + k] = v[k];
    }
  }
}

template <class T>
__global__ void uniform_kernel(T* out, int64_t n, double low, double high, uint64_t seed,
                               uint64_t offset) {
  fill_by_blocks(out, n, seed, offset, [&](uint4 r, T* v) {
    v[0] = uniform_value<T>(r.x, low, high);
    v[1] = uniform_value<T>(r.y, low, high);
    v[2] = uniform_value<T>(r.z, low, high);
    v[3] = uniform_value<T>(r.w, low, high);
  });
}

// Integers in [low, low + range): low + ((r * range) >> 32), range <= 2^32.
template <class T>
__global__ void uniform_int_kernel(T* out, int64_t n, int64_t low, uint64_t range, uint64_t seed,
                                   uint64_t offset) {
  auto scale = [&](uint32_t r) { return T(low + int64_t((uint64_t(r) * range) >> 32)); };
  fill_by_blocks(out, n, seed, offset, [&](uint4 r, T* v) {
    v[0] = scale(r.x);
    v[1] = scale(r.y);
    v[2] = scale(r.z);
    v[3] = scale(r.w);
  });
}

template <class T>
__global__ void normal_kernel(T* out, int64_t n, float mean, float std, uint64_t seed,
                              uint64_t offset) {
  auto shift = [&](float z) { return convert<T>(__fmaf_rn(std, z, mean)); };  // as the CPU
  fill_by_blocks(out, n, seed, offset, [&](uint4 r, T* v) {
    const float2 z01 = box_muller(r.x, r.y), z23 = box_muller(r.z, r.w);
    v[0] = shift(z01.x);
    v[1] = shift(z01.y);
    v[2] = shift(z23.x);
    v[3] = shift(z23.y);
  });
}

}  // namespace

void random_uniform(Buffer out, int64_t n, double low, double high, uint64_t seed, uint64_t offset,
                    Stream stream) {
  if (n == 0) return;
  if (!is_floating(out.dtype)) {
    const int64_t lo = int64_t(low);
    const uint64_t range = uint64_t(int64_t(high) - lo);
    SPMD_CHECK(int64_t(high) > lo && range <= (uint64_t(1) << 32),
               "random_uniform: integer range [", lo, ", ", int64_t(high),
               ") must be non-empty and at most 2^32 wide");
    const unsigned blocks = grid_for((n + 3) / 4, 256);
    switch (out.dtype) {
      case ScalarType::kI64:
        uniform_int_kernel<<<blocks, 256, 0, stream>>>(static_cast<int64_t*>(out.data), n, lo,
                                                       range, seed, offset);
        break;
      case ScalarType::kI32:
        uniform_int_kernel<<<blocks, 256, 0, stream>>>(static_cast<int32_t*>(out.data), n, lo,
                                                       range, seed, offset);
        break;
      case ScalarType::kU8:
        uniform_int_kernel<<<blocks, 256, 0, stream>>>(static_cast<uint8_t*>(out.data), n, lo,
                                                       range, seed, offset);
        break;
      default:
        SPMD_THROW(InvalidArgument, "random_uniform: cannot draw bool values");
    }
    SPMD_CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_floating(out.dtype, "random_uniform", [&](auto tag) {
    using T = typename decltype(tag)::type;
    uniform_kernel<T><<<grid_for((n + 3) / 4, 256), 256, 0, stream>>>(static_cast<T*>(out.data), n,
                                                                      low, high, seed, offset);
  });
  SPMD_CUDA_CHECK_LAUNCH();
}

void random_normal(Buffer out, int64_t n, double mean, double std, uint64_t seed, uint64_t offset,
                   Stream stream) {
  if (n == 0) return;
  dispatch_floating(out.dtype, "random_normal", [&](auto tag) {
    using T = typename decltype(tag)::type;
    normal_kernel<T><<<grid_for((n + 3) / 4, 256), 256, 0, stream>>>(
        static_cast<T*>(out.data), n, float(mean), float(std), seed, offset);
  });
  SPMD_CUDA_CHECK_LAUNCH();
}

}  // namespace spmd::kernels
