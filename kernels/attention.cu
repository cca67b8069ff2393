// Fused attention (kernels/attention.h): the f32 CUDA-core kernels, and the
// dispatch between them and the tensor-core kernels of attention_tc.cu.
// Here tiles are 32 query rows by 32 keys; 256 threads, 8 per row, each
// thread holding D/8 of its row's accumulators. Shared-memory rows are padded
// to D + 1 floats so that the rows a warp reads at once fall in different banks.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/attention_internal.cuh"

namespace spmd::kernels {
namespace attention_detail {
namespace {

constexpr int kBr = 32, kBc = 32, kThreads = 256, kLanes = 8;

// rows row0.. of head (b, h) into dst[32][ld] as f32 times `mult`; rows past
// `rows` become 0.
template <class T>
__device__ __forceinline__ void load_tile(float* dst, int ld, const Heads& t, int64_t b, int64_t h,
                                          int64_t row0, int64_t rows, int D, float mult) {
  const T* base = static_cast<const T*>(t.data) + b * t.sb + h * t.sh;
  for (int e = threadIdx.x; e < kBr * D; e += blockDim.x) {
    const int r = e / D, d = e % D;
    const int64_t row = row0 + r;
    dst[r * ld + d] = row < rows ? convert<float>(base[row * t.st + d * t.sd]) * mult : 0.0f;
  }
}

__device__ __forceinline__ float dot(const float* a, const float* b, int D) {
  float acc = 0.0f;
  for (int d = 0; d < D; ++d) acc += a[d] * b[d];
  return acc;
}

// Reductions over the 8 consecutive lanes that share a row.
__device__ __forceinline__ float row_max(float v) {
  for (int off = kLanes / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
__device__ __forceinline__ float row_sum(float v) {
  for (int off = kLanes / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// --- Forward ---------------------------------------------------------------------

template <class T, int DPT>
__global__ void __launch_bounds__(kThreads) attention_forward_kernel(AttnParams p) {
  extern __shared__ float smem[];
  const int D = p.D, ld = D + 1;
  float* Qs = smem;
  float* Ks = Qs + kBr * ld;
  float* Vs = Ks + kBc * ld;
  float* Ps = Vs + kBc * ld;  // [kBr][kBc + 1]
  const int64_t b = blockIdx.x / p.H, h = blockIdx.x % p.H, hk = h / (p.H / p.Hkv);
  const int64_t i0 = int64_t(blockIdx.y) * kBr;
  const int r = threadIdx.x / kLanes, sub = threadIdx.x % kLanes;
  const int64_t qi = i0 + r;
  load_tile<T>(Qs, ld, p.q, b, h, i0, p.T, D, p.scale);

  float o[DPT] = {}, m = -INFINITY, l = 0.0f;
  const int64_t key_end = p.causal ? min(p.S, i0 + kBr) : p.S;
  for (int64_t j0 = 0; j0 < key_end; j0 += kBc) {
    __syncthreads();
    load_tile<T>(Ks, ld, p.k, b, hk, j0, p.S, D, 1.0f);
    load_tile<T>(Vs, ld, p.v, b, hk, j0, p.S, D, 1.0f);
    __syncthreads();
    float s[kBc / kLanes], tile_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < kBc / kLanes; ++i) {
      const int c = sub + kLanes * i;
      s[i] = visible(p, qi, j0 + c) ? dot(Qs + r * ld, Ks + c * ld, D) : -INFINITY;
      tile_max = fmaxf(tile_max, s[i]);
    }
    const float m_new = fmaxf(m, row_max(tile_max));
    const float alpha = m_new == -INFINITY ? 1.0f : expf(m - m_new);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kBc / kLanes; ++i) {
      const float pv = s[i] == -INFINITY ? 0.0f : expf(s[i] - m_new);
      Ps[r * (kBc + 1) + sub + kLanes * i] = pv;
      sum += pv;
    }
    l = l * alpha + row_sum(sum);
    m = m_new;
    __syncwarp();  // the row's P is written and read by its own 8 lanes
#pragma unroll
    for (int k = 0; k < DPT; ++k) o[k] *= alpha;
    for (int c = 0; c < kBc; ++c) {
      const float pv = Ps[r * (kBc + 1) + c];
#pragma unroll
      for (int k = 0; k < DPT; ++k) {
        const int d = sub + kLanes * k;
        if (d < D) o[k] += pv * Vs[c * ld + d];
      }
    }
  }
  if (qi >= p.T) return;
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int k = 0; k < DPT; ++k) {
    const int d = sub + kLanes * k;
    if (d < D) store_row<T>(p.o, b, h, qi, d, o[k] * inv_l);
  }
  if (sub == 0) p.lse[blockIdx.x * p.T + qi] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// --- Backward ----------------------------------------------------------------------

// delta[row] = sum_d dout[row, d] * out[row, d], a warp per row.
template <class T>
__global__ void attention_delta_kernel(AttnParams p) {
  const int64_t rows = p.B * p.H * p.T;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; row < rows;
       row += warps) {
    const int64_t b = row / (p.H * p.T), h = (row / p.T) % p.H, i = row % p.T;
    const T* dob =
        static_cast<const T*>(p.dout.data) + b * p.dout.sb + h * p.dout.sh + i * p.dout.st;
    const T* ob = static_cast<const T*>(p.o.data) + b * p.o.sb + h * p.o.sh + i * p.o.st;
    float acc = 0.0f;
    for (int d = lane; d < p.D; d += 32)
      acc += convert<float>(dob[d * p.dout.sd]) * convert<float>(ob[d * p.o.sd]);
    acc = warp_reduce(acc, Sum{});
    if (lane == 0) p.delta[row] = acc;
  }
}

// dK, dV for 32 keys of one key head: sums over the query heads of its group
// and over the query tiles that can see these keys.
template <class T, int DPT>
__global__ void __launch_bounds__(kThreads) attention_dkdv_kernel(AttnParams p) {
  extern __shared__ float smem[];
  const int D = p.D, ld = D + 1, lp = kBc + 1;
  float* Ks = smem;
  float* Vs = Ks + kBc * ld;
  float* Qs = Vs + kBc * ld;
  float* dOs = Qs + kBr * ld;
  float* Ps = dOs + kBr * ld;
  float* dSs = Ps + kBr * lp;
  float* lse_s = dSs + kBr * lp;
  float* delta_s = lse_s + kBr;
  const int64_t b = blockIdx.x / p.Hkv, hk = blockIdx.x % p.Hkv, group = p.H / p.Hkv;
  const int64_t j0 = int64_t(blockIdx.y) * kBc;
  const int c = threadIdx.x / kLanes, sub = threadIdx.x % kLanes;
  load_tile<T>(Ks, ld, p.k, b, hk, j0, p.S, D, 1.0f);
  load_tile<T>(Vs, ld, p.v, b, hk, j0, p.S, D, 1.0f);
  float dk[DPT] = {}, dv[DPT] = {};
  const int64_t first_tile = p.causal ? (j0 / kBr) * kBr : 0;
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    for (int64_t i0 = first_tile; i0 < p.T; i0 += kBr) {
      __syncthreads();
      load_tile<T>(Qs, ld, p.q, b, h, i0, p.T, D, 1.0f);
      load_tile<T>(dOs, ld, p.dout, b, h, i0, p.T, D, 1.0f);
      if (threadIdx.x < kBr) {
        const int64_t row = (b * p.H + h) * p.T + i0 + threadIdx.x;
        const bool in = i0 + threadIdx.x < p.T;
        lse_s[threadIdx.x] = in ? p.lse[row] : 0.0f;
        delta_s[threadIdx.x] = in ? p.delta[row] : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < kBr / kLanes; ++i) {
        const int r = sub + kLanes * i;
        float pv = 0.0f, ds = 0.0f;
        if (visible(p, i0 + r, j0 + c)) {
          pv = expf(p.scale * dot(Qs + r * ld, Ks + c * ld, D) - lse_s[r]);
          ds = pv * (dot(dOs + r * ld, Vs + c * ld, D) - delta_s[r]);
        }
        Ps[r * lp + c] = pv;
        dSs[r * lp + c] = ds;
      }
      __syncwarp();  // key row c's P and dS come from its own 8 lanes
      for (int r = 0; r < kBr; ++r) {
        const float pv = Ps[r * lp + c], ds = dSs[r * lp + c];
#pragma unroll
        for (int k = 0; k < DPT; ++k) {
          const int d = sub + kLanes * k;
          if (d < D) {
            dv[k] += pv * dOs[r * ld + d];
            dk[k] += ds * Qs[r * ld + d];
          }
        }
      }
    }
  }
  if (j0 + c >= p.S) return;
#pragma unroll
  for (int k = 0; k < DPT; ++k) {
    const int d = sub + kLanes * k;
    if (d < D) {
      store_row<T>(p.dk, b, hk, j0 + c, d, dk[k] * p.scale);
      store_row<T>(p.dv, b, hk, j0 + c, d, dv[k]);
    }
  }
}

// dQ for 32 queries of one head: a sum over the key tiles they can see.
template <class T, int DPT>
__global__ void __launch_bounds__(kThreads) attention_dq_kernel(AttnParams p) {
  extern __shared__ float smem[];
  const int D = p.D, ld = D + 1, lp = kBc + 1;
  float* Qs = smem;
  float* dOs = Qs + kBr * ld;
  float* Ks = dOs + kBr * ld;
  float* Vs = Ks + kBc * ld;
  float* dSs = Vs + kBc * ld;
  const int64_t b = blockIdx.x / p.H, h = blockIdx.x % p.H, hk = h / (p.H / p.Hkv);
  const int64_t i0 = int64_t(blockIdx.y) * kBr;
  const int r = threadIdx.x / kLanes, sub = threadIdx.x % kLanes;
  const int64_t qi = i0 + r;
  load_tile<T>(Qs, ld, p.q, b, h, i0, p.T, D, 1.0f);
  load_tile<T>(dOs, ld, p.dout, b, h, i0, p.T, D, 1.0f);
  const int64_t row = int64_t(blockIdx.x) * p.T + qi;
  const float lse = qi < p.T ? p.lse[row] : 0.0f, delta = qi < p.T ? p.delta[row] : 0.0f;
  float dq[DPT] = {};
  const int64_t key_end = p.causal ? min(p.S, i0 + kBr) : p.S;
  for (int64_t j0 = 0; j0 < key_end; j0 += kBc) {
    __syncthreads();
    load_tile<T>(Ks, ld, p.k, b, hk, j0, p.S, D, 1.0f);
    load_tile<T>(Vs, ld, p.v, b, hk, j0, p.S, D, 1.0f);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kBc / kLanes; ++i) {
      const int c = sub + kLanes * i;
      float ds = 0.0f;
      if (visible(p, qi, j0 + c)) {
        const float pv = expf(p.scale * dot(Qs + r * ld, Ks + c * ld, D) - lse);
        ds = pv * (dot(dOs + r * ld, Vs + c * ld, D) - delta);
      }
      dSs[r * lp + c] = ds;
    }
    __syncwarp();
    for (int c = 0; c < kBc; ++c) {
      const float ds = dSs[r * lp + c];
#pragma unroll
      for (int k = 0; k < DPT; ++k) {
        const int d = sub + kLanes * k;
        if (d < D) dq[k] += ds * Ks[c * ld + d];
      }
    }
  }
  if (qi >= p.T) return;
#pragma unroll
  for (int k = 0; k < DPT; ++k) {
    const int d = sub + kLanes * k;
    if (d < D) store_row<T>(p.dq, b, h, qi, d, dq[k] * p.scale);
  }
}

// --- Launching ---------------------------------------------------------------------

Heads heads_of(const TensorArg& t) {
  const size_t elem = scalar_size(t.dtype);
  const bool vec = t.strides[3] == 1 && t.strides[2] % 8 == 0 && t.strides[1] % 8 == 0 &&
                   t.strides[0] % 8 == 0 && reinterpret_cast<uintptr_t>(t.data) % 16 == 0 &&
                   elem == 2;
  return {t.data, t.strides[0], t.strides[1], t.strides[2], t.strides[3], vec};
}

AttnParams params_of(const TensorArg& q, const TensorArg& k, const TensorArg& v, bool causal,
                     double scale) {
  SPMD_CHECK(q.ndim == 4 && k.ndim == 4 && v.ndim == 4, "attention: expected 4-d q, k, v");
  AttnParams p{};
  p.B = q.sizes[0];
  p.H = q.sizes[1];
  p.T = q.sizes[2];
  p.D = int(q.sizes[3]);
  p.Hkv = k.sizes[1];
  p.S = k.sizes[2];
  p.scale = float(scale);
  p.causal = causal;
  SPMD_CHECK(p.H % std::max<int64_t>(p.Hkv, 1) == 0 && (p.T + kBr - 1) / kBr <= 65535 &&
                 (p.S + kBc - 1) / kBc <= 65535,
             "attention: ", p.H, " query heads for ", p.Hkv, " key heads, T ", p.T, ", S ", p.S,
             " (need H % Hkv == 0 and T, S < 2M)");
  p.q = heads_of(q);
  p.k = heads_of(k);
  p.v = heads_of(v);
  return p;
}

// Calls f(Tag<T>{}, std::integral_constant<int, DPT>{}) for q's dtype and head size.
template <class F>
void dispatch_simt(const TensorArg& q, F&& f) {
  auto by_size = [&](auto tag) {
    if (q.sizes[3] <= 64) {
      f(tag, std::integral_constant<int, 8>{});
    } else {
      f(tag, std::integral_constant<int, 16>{});
    }
  };
  switch (q.dtype) {
    case ScalarType::kF32:
      return by_size(Tag<float>{});
    case ScalarType::kBF16:
      return by_size(Tag<bf16>{});
    default:
      return by_size(Tag<f16>{});
  }
}

bool use_tensor_cores(const TensorArg& q, AttentionKernel which) {
  return which != AttentionKernel::kSimt && tensor_core_applies(q);
}

}  // namespace
}  // namespace attention_detail

using namespace attention_detail;

bool attention_supported(const TensorArg& q) {
  const bool dtype_ok =
      q.dtype == ScalarType::kF32 || q.dtype == ScalarType::kBF16 || q.dtype == ScalarType::kF16;
  return dtype_ok && q.ndim == 4 && q.sizes[3] >= 1 && q.sizes[3] <= 128;
}

void attention_forward(const TensorArg& q, const TensorArg& k, const TensorArg& v,
                       const TensorArg& out, float* lse, bool causal, double scale,
                       AttentionKernel which, Stream stream) {
  SPMD_CHECK(attention_supported(q), "attention on CUDA: unsupported dtype ", scalar_name(q.dtype),
             " or head size ", q.sizes[3]);
  AttnParams p = params_of(q, k, v, causal, scale);
  p.o = heads_of(out);
  p.lse = lse;
  if (p.B * p.H * p.T == 0) return;
  if (use_tensor_cores(q, which)) return forward_tc(p, q.dtype, stream);
  const size_t smem = (3 * kBr * (p.D + 1) + kBr * (kBc + 1)) * sizeof(float);
  const dim3 grid(unsigned(p.B * p.H), unsigned((p.T + kBr - 1) / kBr));
  dispatch_simt(q, [&](auto tag, auto dpt) {
    using T = typename decltype(tag)::type;
    launch_kernel(attention_forward_kernel<T, decltype(dpt)::value>, grid, kThreads, smem, p,
                  stream);
  });
}

void attention_backward(const TensorArg& dout, const TensorArg& q, const TensorArg& k,
                        const TensorArg& v, const TensorArg& out, const float* lse,
                        const TensorArg& dq, const TensorArg& dk, const TensorArg& dv, bool causal,
                        double scale, AttentionKernel which, Scratch& scratch, Stream stream) {
  SPMD_CHECK(attention_supported(q), "attention on CUDA: unsupported dtype ", scalar_name(q.dtype),
             " or head size ", q.sizes[3]);
  AttnParams p = params_of(q, k, v, causal, scale);
  p.o = heads_of(out);
  p.dout = heads_of(dout);
  p.dq = heads_of(dq);
  p.dk = heads_of(dk);
  p.dv = heads_of(dv);
  p.lse = const_cast<float*>(lse);
  if (p.B * p.H * p.T == 0 || p.S == 0) return;
  p.delta = static_cast<float*>(scratch.allocate(size_t(p.B * p.H * p.T) * sizeof(float)));
  dispatch_simt(q, [&](auto tag, auto) {
    using T = typename decltype(tag)::type;
    attention_delta_kernel<T><<<grid_for(p.B * p.H * p.T * 32, 256), 256, 0, stream>>>(p);
  });
  SPMD_CUDA_CHECK_LAUNCH();
  if (use_tensor_cores(q, which)) return backward_tc(p, q.dtype, stream);
  const int ld = p.D + 1, lp = kBc + 1;
  const size_t smem_dkdv = (4 * kBr * ld + 2 * kBr * lp + 2 * kBr) * sizeof(float);
  const size_t smem_dq = (4 * kBr * ld + kBr * lp) * sizeof(float);
  const dim3 grid_dkdv(unsigned(p.B * p.Hkv), unsigned((p.S + kBc - 1) / kBc));
  const dim3 grid_dq(unsigned(p.B * p.H), unsigned((p.T + kBr - 1) / kBr));
  dispatch_simt(q, [&](auto tag, auto dpt) {
    using T = typename decltype(tag)::type;
    constexpr int kDpt = decltype(dpt)::value;
    launch_kernel(attention_dkdv_kernel<T, kDpt>, grid_dkdv, kThreads, smem_dkdv, p, stream);
    launch_kernel(attention_dq_kernel<T, kDpt>, grid_dq, kThreads, smem_dq, p, stream);
  });
}

}  // namespace spmd::kernels
