// Fused attention on tensor cores (bf16/f16, head size 64 or 128): the same
// FlashAttention algorithm as attention.cu's f32 kernels, with the four
// products of each tile (S = Q K^T, O += P V; backward dP = dO V^T, dV +=
// P^T dO, dK += dS^T Q, dQ += dS K) done by WMMA 16x16x16 fragments with f32
// accumulation. Tiles are 64 queries by 64 keys; a block has 4 warps and warp
// w owns rows 16w..16w+15 of every tile, so after the block-wide loads a warp
// only ever reads what it wrote itself (__syncwarp suffices).
//
// The softmax runs on the f32 scores in shared memory, a row per loop step
// with the warp's 32 lanes over its 64 columns. In the forward pass the
// output accumulator lives in shared memory too, since rescaling it row by
// row needs to know which row an element is in (a fragment does not say);
// the backward's dK, dV and dQ are plain sums and stay in fragments.
//
// This file: the forward kernel and the entry points' dispatch; the
// backward kernels are in attention_tc_backward.cu, the tile building
// blocks they share in attention_tc_tiles.cuh.
#include "kernels/attention_tc_tiles.cuh"

namespace spmd::kernels::attention_detail {
namespace {

template <class T, int D>
__global__ void __launch_bounds__(kTcThreads) attention_forward_tc(AttnParams p) {
  constexpr int ldh = Ld<D>::kH, ldo = Ld<D>::kO;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem);
  T* Ks = Qs + kTile * ldh;
  T* Vs = Ks + kTile * ldh;
  float* Ss = reinterpret_cast<float*>(Vs + kTile * ldh);
  T* Ps = reinterpret_cast<T*>(Ss + kTile * kLdS);
  float* Os = reinterpret_cast<float*>(Ps + kTile * kLdP);
  float* row_m = Os + kTile * ldo;
  float* row_l = row_m + kTile;
  const int64_t b = blockIdx.x / p.H, h = blockIdx.x % p.H, hk = h / (p.H / p.Hkv);
  const int64_t i0 = last_tiles_first(p.T);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = 16 * warp;

  load_tile_tc<T, D>(Qs, p.q, b, h, i0, p.T);
  for (int e = threadIdx.x; e < kTile * ldo; e += blockDim.x) Os[e] = 0.0f;
  if (threadIdx.x < kTile) row_m[threadIdx.x] = -INFINITY, row_l[threadIdx.x] = 0.0f;

  const int64_t key_end = p.causal ? min(p.S, i0 + kTile) : p.S;
  for (int64_t j0 = 0; j0 < key_end; j0 += kTile) {
    __syncthreads();
    load_tile_tc<T, D>(Ks, p.k, b, hk, j0, p.S);
    load_tile_tc<T, D>(Vs, p.v, b, hk, j0, p.S);
    __syncthreads();
    rows_times_rows_t<T, D>(Ss + r0 * kLdS, Qs + r0 * ldh, Ks);
    __syncwarp();
    // Online softmax of the warp's 16 rows; lanes own columns lane and lane + 32.
    for (int r = r0; r < r0 + 16; ++r) {
      float s[2], mx = -INFINITY;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = lane + 32 * c;
        s[c] = visible(p, i0 + r, j0 + col) ? Ss[r * kLdS + col] * p.scale : -INFINITY;
        mx = fmaxf(mx, s[c]);
      }
      mx = warp_reduce(mx, Max{});
      const float m_old = row_m[r], m_new = fmaxf(m_old, mx);
      const float alpha = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float pv = s[c] == -INFINITY ? 0.0f : expf(s[c] - m_new);
        Ps[r * kLdP + lane + 32 * c] = convert<T>(pv);
        sum += pv;
      }
      sum = warp_reduce(sum, Sum{});
      for (int d = lane; d < D; d += 32) Os[r * ldo + d] *= alpha;
      __syncwarp();  // every lane has read row_m[r] before lane 0 writes it
      if (lane == 0) row_m[r] = m_new, row_l[r] = row_l[r] * alpha + sum;
    }
    __syncwarp();
    // O[16 rows] += P V, through fragments loaded from and stored to Os.
    FragC acc[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; ++n)
      wmma::load_matrix_sync(acc[n], Os + r0 * ldo + 16 * n, ldo, wmma::mem_row_major);
    accumulate_p_times<T, D>(acc, Ps + r0 * kLdP, Vs);
#pragma unroll
    for (int n = 0; n < D / 16; ++n)
      wmma::store_matrix_sync(Os + r0 * ldo + 16 * n, acc[n], ldo, wmma::mem_row_major);
    __syncwarp();
  }
  __syncwarp();
  for (int e = lane; e < 16 * D; e += 32) {
    const int r = r0 + e / D, d = e % D;
    const float l = row_l[r];
    if (i0 + r < p.T) store_row<T>(p.o, b, h, i0 + r, d, l > 0.0f ? Os[r * ldo + d] / l : 0.0f);
  }
  if (lane < 16 && i0 + r0 + lane < p.T) {
    const float l = row_l[r0 + lane];
    p.lse[blockIdx.x * p.T + i0 + r0 + lane] = l > 0.0f ? row_m[r0 + lane] + logf(l) : -INFINITY;
  }
}

template <class T, int D>
size_t forward_smem() {
  return 3 * kTile * Ld<D>::kH * sizeof(T) + kTile * kLdS * 4 + kTile * kLdP * sizeof(T) +
         kTile * Ld<D>::kO * 4 + 2 * kTile * 4;
}

template <class T, int D>
void forward_as(const AttnParams& p, Stream stream) {
  const dim3 grid(unsigned(p.B * p.H), unsigned((p.T + kTile - 1) / kTile));
  launch_kernel(attention_forward_tc<T, D>, grid, kTcThreads, forward_smem<T, D>(), p, stream);
}

}  // namespace

bool tensor_core_applies(const TensorArg& q) {
  return (q.dtype == ScalarType::kBF16 || q.dtype == ScalarType::kF16) &&
         (q.sizes[3] == 64 || q.sizes[3] == 128);
}

void forward_tc(const AttnParams& p, ScalarType dtype, Stream stream) {
  dispatch_tc(dtype, p.D, [&](auto tag, auto d) {
    forward_as<typename decltype(tag)::type, decltype(d)::value>(p, stream);
  });
}

}  // namespace spmd::kernels::attention_detail
