// The building blocks of the tensor-core attention kernels (attention_tc.cu
// for the forward pass, attention_tc_backward.cu for the backward): the tile
// shape and shared-memory strides, the WMMA fragment types, a 64-row tile of
// a head loaded into shared memory, the two products every pass is made of
// (scores = rows times rows transposed; accumulators += P times a tile), a
// warp's rows of fragments stored to a head, the order of the query tiles,
// and the dispatch over element type and head size. Included by those two
// files only.
#pragma once

#include <mma.h>

#include <type_traits>

#include "kernels/attention_internal.cuh"

namespace spmd::kernels::attention_detail {

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

// Calls f(Tag<T>{}, std::integral_constant<int, D>{}) for the element type
// (bf16 or f16) and head size (64 or 128) of a launch.
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

}  // namespace spmd::kernels::attention_detail
