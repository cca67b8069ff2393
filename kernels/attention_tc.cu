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
#include <mma.h>

#include "kernels/attention_internal.cuh"

namespace spmd::kernels::attention_detail {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTile = 64, kTcThreads = 128;  // 4 warps
constexpr int kLdS = kTile + 4;              // f32 score rows (a multiple of 4 floats)
constexpr int kLdP = kTile + 8;              // 16-bit P rows (a multiple of 8 halves, 16 bytes)

template <int D>
struct Ld {
  static constexpr int kH = D + 8;  // 16-bit Q/K/V rows
  static constexpr int kO = D + 4;  // f32 output rows
};

template <class T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <class T, class Layout>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, Layout>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// rows row0.. of head (b, h) into dst[64][ld]; rows past `rows` are zero.
// 16 bytes per access when the rows are contiguous and aligned.
template <class T, int D>
__device__ __forceinline__ void load_tile_tc(T* dst, const Heads& t, int64_t b, int64_t h,
                                             int64_t row0, int64_t rows) {
  constexpr int ld = Ld<D>::kH;
  const T* base = static_cast<const T*>(t.data) + b * t.sb + h * t.sh;
  if (t.vec) {
    constexpr int kChunks = D / 8;
    for (int e = threadIdx.x; e < kTile * kChunks; e += blockDim.x) {
      const int r = e / kChunks, c = e % kChunks;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (row0 + r < rows) v = *reinterpret_cast<const uint4*>(base + (row0 + r) * t.st + c * 8);
      *reinterpret_cast<uint4*>(dst + r * ld + c * 8) = v;
    }
  } else {
    for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
      const int r = e / D, d = e % D;
      dst[r * ld + d] = row0 + r < rows ? base[(row0 + r) * t.st + d * t.sd] : convert<T>(0.0f);
    }
  }
}

// out[16 x 64] (f32, ld kLdS) = A[16 x D] (row-major) times B^T, B[64 x D] row-major.
template <class T, int D>
__device__ __forceinline__ void rows_times_rows_t(float* out, const T* a, const T* b) {
  constexpr int ld = Ld<D>::kH;
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      FragA<T> fa;
      FragB<T, wmma::col_major> fb;  // B^T's element (k, n) is B[n][k]
      wmma::load_matrix_sync(fa, a + 16 * k, ld);
      wmma::load_matrix_sync(fb, b + 16 * n * ld + 16 * k, ld);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + 16 * n, acc, kLdS, wmma::mem_row_major);
  }
}

// acc[n] += P[16 x 64] (ld kLdP) times M[64 x D] (ld Ld<D>::kH), for each 16-column block n.
template <class T, int D>
__device__ __forceinline__ void accumulate_p_times(FragC (&acc)[D / 16], const T* p, const T* m) {
#pragma unroll
  for (int k = 0; k < kTile / 16; ++k) {
    FragA<T> fa;
    wmma::load_matrix_sync(fa, p + 16 * k, kLdP);
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      FragB<T, wmma::row_major> fb;
      wmma::load_matrix_sync(fb, m + 16 * k * Ld<D>::kH + 16 * n, Ld<D>::kH);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// Writes a warp's 16 rows of fragments (times `mult`) to rows row0.. of head
// (b, h) of t, through `stage` (16 x Ld<D>::kO floats).
template <class T, int D>
__device__ __forceinline__ void store_rows(FragC (&acc)[D / 16], float mult, float* stage,
                                           const Heads& t, int64_t b, int64_t h, int64_t row0,
                                           int64_t rows) {
  constexpr int ld = Ld<D>::kO;
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    for (int i = 0; i < acc[n].num_elements; ++i) acc[n].x[i] *= mult;
    wmma::store_matrix_sync(stage + 16 * n, acc[n], ld, wmma::mem_row_major);
  }
  __syncwarp();
  const int lane = threadIdx.x & 31;
  for (int e = lane; e < 16 * D; e += 32) {
    const int r = e / D, d = e % D;
    if (row0 + r < rows) store_row<T>(t, b, h, row0 + r, d, stage[r * ld + d]);
  }
  __syncwarp();
}

// The first query row of this block's tile, the last tiles first: under a
// causal mask tile i walks i + 1 key tiles, and blocks start in blockIdx
// order, so giving the low blockIdx.y the long tiles keeps the short ones
// for the end instead of leaving a tail of long blocks on an idle GPU. (The
// dK/dV kernel's long tiles are its first ones already.)
__device__ __forceinline__ int64_t last_tiles_first(int64_t T) {
  const int64_t tiles = (T + kTile - 1) / kTile;
  return (tiles - 1 - int64_t(blockIdx.y)) * kTile;
}

// --- Forward -----------------------------------------------------------------------

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

// --- Backward ------------------------------------------------------------------------

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
size_t forward_smem() {
  return 3 * kTile * Ld<D>::kH * sizeof(T) + kTile * kLdS * 4 + kTile * kLdP * sizeof(T) +
         kTile * Ld<D>::kO * 4 + 2 * kTile * 4;
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
void forward_as(const AttnParams& p, Stream stream) {
  const dim3 grid(unsigned(p.B * p.H), unsigned((p.T + kTile - 1) / kTile));
  launch_kernel(attention_forward_tc<T, D>, grid, kTcThreads, forward_smem<T, D>(), p, stream);
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

template <class F>
void dispatch_tc(ScalarType dtype, int D, F&& f) {
  auto by_size = [&](auto tag) {
    if (D == 64)
      f(tag, std::integral_constant<int, 64>{});
    else
      f(tag, std::integral_constant<int, 128>{});
  };
  if (dtype == ScalarType::kBF16)
    by_size(Tag<bf16>{});
  else
    by_size(Tag<f16>{});
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

void backward_tc(const AttnParams& p, ScalarType dtype, Stream stream) {
  dispatch_tc(dtype, p.D, [&](auto tag, auto d) {
    backward_as<typename decltype(tag)::type, decltype(d)::value>(p, stream);
  });
}

}  // namespace spmd::kernels::attention_detail
