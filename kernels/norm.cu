// Layer norm and RMS norm, forward and backward (kernels/nn.h).
//
// Forward: a block per row computes the statistics (two passes for the
// variance, the row staying in L1), then writes y. Backward: a block per row
// computes dx from the saved statistics; the weight and bias gradients, sums
// of dy * xhat and dy over all rows, are summed by column over chunks of rows
// (a block of 32 columns x 8 row-lanes per chunk) into a scratch buffer, and a
// last kernel adds the chunks: deterministic, no atomics.
//
//   layer norm: xhat = (x - mean) rstd,  dx = rstd (g - mean(g) - xhat mean(g xhat))
//   rms norm:   xhat = x rstd,           dx = rstd (g - xhat mean(g xhat))
//   with g = dy * weight (dy when there is no weight).
#include <algorithm>
#include <cmath>

#include "kernels/device.cuh"
#include "kernels/math.cuh"
#include "kernels/nn.h"

namespace spmd::kernels {
namespace {

template <class A>
__device__ __forceinline__ A weight_at(Buffer w, int64_t c) {
  return w.data ? load_as<A>(w.data, w.dtype, c) : A(1);
}

// rms = true: RMS norm (no mean, no bias).
template <class T>
__global__ void norm_forward_kernel(const T* x, Buffer weight, Buffer bias, double eps, T* y,
                                    Buffer mean_out, Buffer rstd_out, int64_t cols, bool rms) {
  using A = compute_t<T>;
  __shared__ A shared[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * cols;
  A mean = 0;
  if (!rms) {
    A s = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += convert<A>(xr[c]);
    mean = block_reduce(s, Sum{}, shared) / A(cols);
  }
  A ss = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const A d = convert<A>(xr[c]) - mean;
    ss += d * d;
  }
  const A rstd = A(1) / m_sqrt(block_reduce(ss, Sum{}, shared) / A(cols) + A(eps));
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    A v = (convert<A>(xr[c]) - mean) * rstd * weight_at<A>(weight, c);
    if (bias.data) v += load_as<A>(bias.data, bias.dtype, c);
    y[row * cols + c] = convert<T>(v);
  }
  if (threadIdx.x == 0) {
    if (mean_out.data) store_as<A>(mean_out.data, mean_out.dtype, row, mean);
    store_as<A>(rstd_out.data, rstd_out.dtype, row, rstd);
  }
}

template <class T>
__global__ void norm_backward_dx_kernel(const T* dy, const T* x, Buffer weight, Buffer mean_in,
                                        Buffer rstd_in, T* dx, int64_t cols) {
  using A = compute_t<T>;
  __shared__ A shared[32];
  const int64_t row = blockIdx.x, base = row * cols;
  const A mean = mean_in.data ? load_as<A>(mean_in.data, mean_in.dtype, row) : A(0);
  const A rstd = load_as<A>(rstd_in.data, rstd_in.dtype, row);
  A sum_g = 0, sum_gx = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const A g = convert<A>(dy[base + c]) * weight_at<A>(weight, c);
    sum_g += g;
    sum_gx += g * (convert<A>(x[base + c]) - mean) * rstd;
  }
  const A mean_g = mean_in.data ? block_reduce(sum_g, Sum{}, shared) / A(cols) : A(0);
  const A mean_gx = block_reduce(sum_gx, Sum{}, shared) / A(cols);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const A g = convert<A>(dy[base + c]) * weight_at<A>(weight, c);
    const A xhat = (convert<A>(x[base + c]) - mean) * rstd;
    dx[base + c] = convert<T>(rstd * (g - mean_g - xhat * mean_gx));
  }
}

constexpr int kColumnsPerBlock = 32, kRowLanes = 8;

// partial_w[chunk][c] = sum over the chunk's rows of dy * xhat; partial_b of dy.
template <class T>
__global__ void norm_param_partial_kernel(const T* dy, const T* x, Buffer mean_in, Buffer rstd_in,
                                          int64_t rows, int64_t cols, int64_t rows_per_chunk,
                                          compute_t<T>* partial_w, compute_t<T>* partial_b) {
  using A = compute_t<T>;
  __shared__ A sw[kRowLanes][kColumnsPerBlock + 1], sb[kRowLanes][kColumnsPerBlock + 1];
  const int64_t c = int64_t(blockIdx.x) * kColumnsPerBlock + threadIdx.x;
  const int64_t first = blockIdx.y * rows_per_chunk;
  const int64_t last = min(rows, first + rows_per_chunk);
  A acc_w = 0, acc_b = 0;
  if (c < cols) {
    for (int64_t r = first + threadIdx.y; r < last; r += kRowLanes) {
      const A mean = mean_in.data ? load_as<A>(mean_in.data, mean_in.dtype, r) : A(0);
      const A rstd = load_as<A>(rstd_in.data, rstd_in.dtype, r);
      const A g = convert<A>(dy[r * cols + c]);
      acc_w += g * (convert<A>(x[r * cols + c]) - mean) * rstd;
      acc_b += g;
    }
  }
  sw[threadIdx.y][threadIdx.x] = acc_w;
  sb[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  for (int k = 1; k < kRowLanes; ++k) {
    acc_w += sw[k][threadIdx.x];
    acc_b += sb[k][threadIdx.x];
  }
  partial_w[blockIdx.y * cols + c] = acc_w;
  partial_b[blockIdx.y * cols + c] = acc_b;
}

template <class A>
__global__ void norm_param_final_kernel(const A* partial_w, const A* partial_b, int64_t chunks,
                                        int64_t cols, Buffer dweight, Buffer dbias) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  A w = 0, b = 0;
  for (int64_t k = 0; k < chunks; ++k) {
    w += partial_w[k * cols + c];
    b += partial_b[k * cols + c];
  }
  if (dweight.data) store_as<A>(dweight.data, dweight.dtype, c, w);
  if (dbias.data) store_as<A>(dbias.data, dbias.dtype, c, b);
}

template <class T>
void norm_backward(Buffer dy, Buffer x, Buffer weight, Buffer mean, Buffer rstd, Buffer dx,
                   Buffer dweight, Buffer dbias, int64_t rows, int64_t cols, Scratch& scratch,
                   Stream stream) {
  using A = compute_t<T>;
  const T* dyp = static_cast<const T*>(dy.data);
  const T* xp = static_cast<const T*>(x.data);
  if (dx.data) {
    norm_backward_dx_kernel<T><<<unsigned(rows), threads_for_row(cols), 0, stream>>>(
        dyp, xp, weight, mean, rstd, static_cast<T*>(dx.data), cols);
    SPMD_CUDA_CHECK_LAUNCH();
  }
  if (!dweight.data && !dbias.data) return;
  // Enough chunks of rows to give the GPU a few blocks per multiprocessor.
  const int64_t col_blocks = (cols + kColumnsPerBlock - 1) / kColumnsPerBlock;
  const int64_t want = std::max<int64_t>(1, 4 * multiprocessor_count() / col_blocks);
  const int64_t chunks = std::min<int64_t>({want, (rows + 31) / 32, 65535});
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  A* partial = static_cast<A*>(scratch.allocate(2 * size_t(chunks * cols) * sizeof(A)));
  norm_param_partial_kernel<T><<<dim3(unsigned(col_blocks), unsigned(chunks)),
                                 dim3(kColumnsPerBlock, kRowLanes), 0, stream>>>(
      dyp, xp, mean, rstd, rows, cols, rows_per_chunk, partial, partial + chunks * cols);
  SPMD_CUDA_CHECK_LAUNCH();
  norm_param_final_kernel<A><<<unsigned((cols + 255) / 256), 256, 0, stream>>>(
      partial, partial + chunks * cols, chunks, cols, dweight, dbias);
  SPMD_CUDA_CHECK_LAUNCH();
}

}  // namespace

void layer_norm(Buffer x, Buffer weight, Buffer bias, double eps, Buffer y, Buffer mean,
                Buffer rstd, int64_t rows, int64_t cols, Stream stream) {
  if (rows == 0) return;
  dispatch_floating(x.dtype, "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    norm_forward_kernel<T><<<unsigned(rows), threads_for_row(cols), 0, stream>>>(
        static_cast<const T*>(x.data), weight, bias, eps, static_cast<T*>(y.data), mean, rstd, cols,
        false);
  });
  SPMD_CUDA_CHECK_LAUNCH();
}

void layer_norm_backward(Buffer dy, Buffer x, Buffer weight, Buffer mean, Buffer rstd, Buffer dx,
                         Buffer dweight, Buffer dbias, int64_t rows, int64_t cols, Scratch& scratch,
                         Stream stream) {
  if (rows == 0 || cols == 0) return;
  dispatch_floating(x.dtype, "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    norm_backward<T>(dy, x, weight, mean, rstd, dx, dweight, dbias, rows, cols, scratch, stream);
  });
}

void rms_norm(Buffer x, Buffer weight, double eps, Buffer y, Buffer rstd, int64_t rows,
              int64_t cols, Stream stream) {
  if (rows == 0) return;
  dispatch_floating(x.dtype, "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    norm_forward_kernel<T><<<unsigned(rows), threads_for_row(cols), 0, stream>>>(
        static_cast<const T*>(x.data), weight, Buffer{}, eps, static_cast<T*>(y.data), Buffer{},
        rstd, cols, true);
  });
  SPMD_CUDA_CHECK_LAUNCH();
}

void rms_norm_backward(Buffer dy, Buffer x, Buffer weight, Buffer rstd, Buffer dx, Buffer dweight,
                       int64_t rows, int64_t cols, Scratch& scratch, Stream stream) {
  if (rows == 0 || cols == 0) return;
  dispatch_floating(x.dtype, "rms_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    norm_backward<T>(dy, x, weight, Buffer{}, rstd, dx, dweight, Buffer{}, rows, cols, scratch,
                     stream);
  });
}

}  // namespace spmd::kernels
