// The backward pass of the tensor-core attention (attention_tc.cu has the
// algorithm and the forward pass): two kernels, as FlashAttention-2's. One
// block per (key/value head, key tile) walks the query tiles of every query
// head of its group and accumulates dK and dV in fragments; one block per
// (query head, query tile) walks the key tiles and accumulates dQ. Both recompute P from the saved
// log-sum-exp, and dS = P (dP - delta) from delta = rowsum(dO * O); the tile building blocks are
// attention_tc_tiles.cuh's.
#include "kernels/attention_tc_tiles.cuh"

namespace spmd::kernels::attention_detail {
namespace {

// Fills P (f32 in registers, 16-bit in shared memory) of the warp's 16 rows
// from scores in Ss: p = exp(scale s - lse) where visible. `keys_are_rows`:
// the rows are keys and the columns queries (the dK/dV kernel's transposed tile).
template <class T>
__device__ __forceinline__ void probabilities(const AttnParams& p, const float* Ss, T* Ps,
                                              float (&pv)[16][2], int r0, int64_t row_base,
                                              int64_t col_base, const float* lse_of_query,
                                              bool keys_are_rows) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int r = r0 + i, col = lane + 32 * c;
      const int64_t q = keys_are_rows ? col_base + col : row_base + r;
      const int64_t k = keys_are_rows ? row_base + r : col_base + col;
      const float lse = lse_of_query[keys_are_rows ? col : r];
      const float v = visible(p, q, k) ? expf(p.scale * Ss[r * kLdS + col] - lse) : 0.0f;
      pv[i][c] = v;
      Ps[r * kLdP + col] = convert<T>(v);
    }
  }
}

// The saved log-sum-exp and delta (rowsum(dO * O)) of query rows i0 .. i0 +
// kTile of head `bh` (= b * H + h) into shared memory, zero past T.
__device__ __forceinline__ void load_row_stats(const AttnParams& p, int64_t bh, int64_t i0,
                                               float* lse_s, float* delta_s) {
  if (threadIdx.x < kTile) {
    const int64_t row = bh * p.T + i0 + threadIdx.x;
    const bool in = i0 + threadIdx.x < p.T;
    lse_s[threadIdx.x] = in ? p.lse[row] : 0.0f;
    delta_s[threadIdx.x] = in ? p.delta[row] : 0.0f;
  }
}

// dS = P (dP - delta) into dSs (16-bit) from dP in Ss.
template <class T>
__device__ __forceinline__ void score_grads(const float* Ss, T* dSs, const float (&pv)[16][2],
                                            int r0, const float* delta_of_query,
                                            bool keys_are_rows) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int r = r0 + i, col = lane + 32 * c;
      const float delta = delta_of_query[keys_are_rows ? col : r];
      dSs[r * kLdP + col] = convert<T>(pv[i][c] * (Ss[r * kLdS + col] - delta));
    }
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kTcThreads) attention_dkdv_tc(AttnParams p) {
  constexpr int ldh = Ld<D>::kH;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Ks = reinterpret_cast<T*>(smem);
  T* Vs = Ks + kTile * ldh;
  T* Qs = Vs + kTile * ldh;
  T* dOs = Qs + kTile * ldh;
  float* Ss = reinterpret_cast<float*>(dOs + kTile * ldh);
  T* Ps = reinterpret_cast<T*>(Ss + kTile * kLdS);
  T* dSs = Ps + kTile * kLdP;
  float* lse_s = reinterpret_cast<float*>(dSs + kTile * kLdP);
  float* delta_s = lse_s + kTile;
  const int64_t b = blockIdx.x / p.Hkv, hk = blockIdx.x % p.Hkv, group = p.H / p.Hkv;
  const int64_t j0 = int64_t(blockIdx.y) * kTile;
  const int warp = threadIdx.x / 32, r0 = 16 * warp;

  load_tile_tc<T, D>(Ks, p.k, b, hk, j0, p.S);
  load_tile_tc<T, D>(Vs, p.v, b, hk, j0, p.S);
  FragC dk[D / 16], dv[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n)
    wmma::fill_fragment(dk[n], 0.0f), wmma::fill_fragment(dv[n], 0.0f);
  float pv[16][2];
  const int64_t first = p.causal ? (j0 / kTile) * kTile : 0;
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    for (int64_t i0 = first; i0 < p.T; i0 += kTile) {
      __syncthreads();
      load_tile_tc<T, D>(Qs, p.q, b, h, i0, p.T);
      load_tile_tc<T, D>(dOs, p.dout, b, h, i0, p.T);
      load_row_stats(p, b * p.H + h, i0, lse_s, delta_s);
      __syncthreads();
      rows_times_rows_t<T, D>(Ss + r0 * kLdS, Ks + r0 * ldh, Qs);  // S^T = K Q^T
      __syncwarp();
      probabilities(p, Ss, Ps, pv, r0, j0, i0, lse_s, true);
      __syncwarp();
      rows_times_rows_t<T, D>(Ss + r0 * kLdS, Vs + r0 * ldh, dOs);  // dP^T = V dO^T
      __syncwarp();
      score_grads(Ss, dSs, pv, r0, delta_s, true);
      __syncwarp();
      accumulate_p_times<T, D>(dv, Ps + r0 * kLdP, dOs);  // dV += P^T dO
      accumulate_p_times<T, D>(dk, dSs + r0 * kLdP, Qs);  // dK += dS^T Q
    }
  }
  __syncthreads();  // Qs and dOs become the staging area of the results
  float* stage = reinterpret_cast<float*>(Qs) + r0 * Ld<D>::kO;
  store_rows<T, D>(dk, p.scale, stage, p.dk, b, hk, j0 + r0, p.S);
  store_rows<T, D>(dv, 1.0f, stage, p.dv, b, hk, j0 + r0, p.S);
}

template <class T, int D>
__global__ void __launch_bounds__(kTcThreads) attention_dq_tc(AttnParams p) {
  constexpr int ldh = Ld<D>::kH;
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem);
  T* dOs = Qs + kTile * ldh;
  T* Ks = dOs + kTile * ldh;
  T* Vs = Ks + kTile * ldh;
  float* Ss = reinterpret_cast<float*>(Vs + kTile * ldh);
  T* dSs = reinterpret_cast<T*>(Ss + kTile * kLdS);
  float* lse_s = reinterpret_cast<float*>(dSs + kTile * kLdP);
  float* delta_s = lse_s + kTile;
  const int64_t b = blockIdx.x / p.H, h = blockIdx.x % p.H, hk = h / (p.H / p.Hkv);
  const int64_t i0 = last_tiles_first(p.T);
  const int warp = threadIdx.x / 32, r0 = 16 * warp;

  load_tile_tc<T, D>(Qs, p.q, b, h, i0, p.T);
  load_tile_tc<T, D>(dOs, p.dout, b, h, i0, p.T);
  load_row_stats(p, b * p.H + h, i0, lse_s, delta_s);
  FragC dq[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(dq[n], 0.0f);
  float pv[16][2];
  T* Ps = dSs;  // P's 16-bit copy is not needed here: dS overwrites it
  const int64_t key_end = p.causal ? min(p.S, i0 + kTile) : p.S;
  for (int64_t j0 = 0; j0 < key_end; j0 += kTile) {
    __syncthreads();
    load_tile_tc<T, D>(Ks, p.k, b, hk, j0, p.S);
    load_tile_tc<T, D>(Vs, p.v, b, hk, j0, p.S);
    __syncthreads();
    rows_times_rows_t<T, D>(Ss + r0 * kLdS, Qs + r0 * ldh, Ks);  // S = Q K^T
    __syncwarp();
    probabilities(p, Ss, Ps, pv, r0, i0, j0, lse_s, false);
    __syncwarp();
    rows_times_rows_t<T, D>(Ss + r0 * kLdS, dOs + r0 * ldh, Vs);  // dP = dO V^T
    __syncwarp();
    score_grads(Ss, dSs, pv, r0, delta_s, false);
    __syncwarp();
    accumulate_p_times<T, D>(dq, dSs + r0 * kLdP, Ks);  // dQ += dS K
  }
  __syncthreads();  // Ks and Vs become the staging area
  float* stage = reinterpret_cast<float*>(Ks) + r0 * Ld<D>::kO;
  store_rows<T, D>(dq, p.scale, stage, p.dq, b, h, i0 + r0, p.T);
}

template <class T, int D>
size_t dkdv_smem() {
  return 4 * kTile * Ld<D>::kH * sizeof(T) + kTile * kLdS * 4 + 2 * kTile * kLdP * sizeof(T) +
         2 * kTile * 4;
}
template <class T, int D>
size_t dq_smem() {
  return 4 * kTile * Ld<D>::kH * sizeof(T) + kTile * kLdS * 4 + kTile * kLdP * sizeof(T) +
         2 * kTile * 4;
}

template <class T, int D>
void backward_as(const AttnParams& p, Stream stream) {
  launch_kernel(attention_dkdv_tc<T, D>,
                dim3(unsigned(p.B * p.Hkv), unsigned((p.S + kTile - 1) / kTile)), kTcThreads,
                dkdv_smem<T, D>(), p, stream);
  launch_kernel(attention_dq_tc<T, D>,
                dim3(unsigned(p.B * p.H), unsigned((p.T + kTile - 1) / kTile)), kTcThreads,
                dq_smem<T, D>(), p, stream);
}

}  // namespace

void backward_tc(const AttnParams& p, ScalarType dtype, Stream stream) {
  dispatch_tc(dtype, p.D, [&](auto tag, auto d) {
    backward_as<typename decltype(tag)::type, decltype(d)::value>(p, stream);
  });
}

}  // namespace spmd::kernels::attention_detail
