// Random numbers on the GPU: exactly the Philox-4x32-10 mapping of
// tensor/random.h, so a seed gives the same tensor on the GPU as on the CPU.
// Each thread computes one Philox block (four 32-bit words) for four
// consecutive elements. Uniform values are bit-identical to the CPU's (the
// arithmetic is written out so that the compiler fuses no multiply-add);
// normal values go through logf, sinf and cosf, whose last bit may differ
// between CUDA's and the C library's implementations.
#pragma once

#include "kernels/types.h"

namespace spmd::kernels {

// out[i] (n contiguous elements) = uniform in [low, high) from counters
// offset + i / 4; for an integer dtype, the integers low + ((r * (high - low))
// >> 32), high - low <= 2^32.
void random_uniform(Buffer out, int64_t n, double low, double high, uint64_t seed, uint64_t offset,
                    Stream stream);
// out[i] = mean + std * z, z standard normal by Box-Muller on the lane pairs.
void random_normal(Buffer out, int64_t n, double mean, double std, uint64_t seed, uint64_t offset,
                   Stream stream);

}  // namespace spmd::kernels
