// What the fused-attention files share (kernels/attention.h): the
// parameters of a launch, the visibility rule, storing one element, the
// launch helper, and the tensor-core path's entry points (attention_tc.cu,
// attention_tc_backward.cu). Included by attention.cu and, through
// attention_tc_tiles.cuh, by the tensor-core files only.
#pragma once

#include <cmath>

#include "kernels/attention.h"
#include "kernels/device.cuh"

namespace spmd::kernels::attention_detail {

struct Heads {  // a (B, H, T, D) tensor
  void* data;
  int64_t sb, sh, st, sd;
  bool vec;  // rows contiguous in D and 16-byte aligned: 16-byte loads
};

struct AttnParams {
  int64_t B, H, Hkv, T, S;
  int D;
  float scale;
  bool causal;
  Heads q, k, v, o, dout, dq, dk, dv;
  float* lse;
  float* delta;  // backward: rowsum(dout * out)
};

// Query i sees key j: both in range, and j <= i when causal.
__device__ __forceinline__ bool visible(const AttnParams& p, int64_t qi, int64_t kj) {
  return qi < p.T && kj < p.S && (!p.causal || kj <= qi);
}

template <class T>
__device__ __forceinline__ void store_row(const Heads& t, int64_t b, int64_t h, int64_t row, int d,
                                          float value) {
  static_cast<T*>(t.data)[b * t.sb + h * t.sh + row * t.st + d * t.sd] = convert<T>(value);
}

// Launches kernel with `smem` bytes of dynamic shared memory, raising the
// kernel's limit past the default 48 KB when it needs more.
template <class Kernel>
void launch_kernel(Kernel kernel, dim3 grid, int threads, size_t smem, const AttnParams& p,
                   Stream stream) {
  if (smem > 48 * 1024) {
    SPMD_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  kernel<<<grid, threads, smem, stream>>>(p);
  SPMD_CUDA_CHECK_LAUNCH();
}

// The tensor-core path (attention_tc.cu, attention_tc_backward.cu): bf16/f16
// with head size 64 or 128.
bool tensor_core_applies(const TensorArg& q);
void forward_tc(const AttnParams& p, ScalarType dtype, Stream stream);
// REQUIRES: p.delta filled (attention.cu's delta kernel).
void backward_tc(const AttnParams& p, ScalarType dtype, Stream stream);

}  // namespace spmd::kernels::attention_detail
