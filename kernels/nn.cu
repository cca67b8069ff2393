// Softmax, cross-entropy, rotary embeddings and the fused AdamW step
// (kernels/nn.h; the norms are in norm.cu). A block owns a row: its threads
// stride over the row, then reduce across the block.
#include <cmath>

#include "kernels/device.cuh"
#include "kernels/math.cuh"
#include "kernels/nn.h"

namespace spmd::kernels {
namespace {

// --- softmax ------------------------------------------------------------------

template <class T>
__global__ void softmax_kernel(const T* x, T* y, int64_t cols, bool log) {
  using A = compute_t<T>;
  __shared__ A shared[32];
  const T* xr = x + blockIdx.x * cols;
  T* yr = y + blockIdx.x * cols;
  A m = A(-INFINITY);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = max_nan(m, convert<A>(xr[c]));
  m = block_reduce(m, Max{}, shared);
  A s = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += m_exp(convert<A>(xr[c]) - m);
  s = block_reduce(s, Sum{}, shared);
  const A log_s = m_log(s), inv_s = A(1) / s;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const A v = convert<A>(xr[c]) - m;
    yr[c] = convert<T>(log ? v - log_s : m_exp(v) * inv_s);
  }
}

// softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy).
template <class T>
__global__ void softmax_backward_kernel(const T* dy, const T* y, T* dx, int64_t cols, bool log) {
  using A = compute_t<T>;
  __shared__ A shared[32];
  const int64_t base = blockIdx.x * cols;
  A s = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const A g = convert<A>(dy[base + c]);
    s += log ? g : g * convert<A>(y[base + c]);
  }
  s = block_reduce(s, Sum{}, shared);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const A g = convert<A>(dy[base + c]), v = convert<A>(y[base + c]);
    dx[base + c] = convert<T>(log ? g - m_exp(v) * s : v * (g - s));
  }
}

// --- cross-entropy -----------------------------------------------------------------

// One pass over the row: each thread keeps a running max and a sum of
// exponentials relative to it (the online softmax), then the block combines.
template <class T>
__global__ void cross_entropy_kernel(const T* logits, Buffer targets, int64_t ignore_index,
                                     Buffer loss, Buffer lse, int64_t cols) {
  using A = compute_t<T>;
  __shared__ A shared[32];
  const int64_t row = blockIdx.x;
  const T* xr = logits + row * cols;
  A m = A(-INFINITY), s = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const A v = convert<A>(xr[c]);
    if (v == A(-INFINITY)) continue;
    if (v > m) {
      s = s * m_exp(m - v) + A(1);
      m = v;
    } else {
      s += m_exp(v - m);
    }
  }
  const A row_max = block_reduce(m, Max{}, shared);
  const A local = m == A(-INFINITY) ? A(0) : s * m_exp(m - row_max);
  const A total = block_reduce(local, Sum{}, shared);
  if (threadIdx.x != 0) return;
  const A l = row_max + m_log(total);
  store_as<A>(lse.data, lse.dtype, row, l);
  const int64_t t = load_as<int64_t>(targets.data, targets.dtype, row);
  A value = 0;
  if (t != ignore_index) value = (t >= 0 && t < cols) ? l - convert<A>(xr[t]) : A(NAN);
  store_as<A>(loss.data, loss.dtype, row, value);
}

template <class T>
__global__ void cross_entropy_backward_kernel(const T* logits, Buffer targets, Buffer lse,
                                              Buffer dloss, int64_t dloss_stride,
                                              int64_t ignore_index, T* dlogits, int64_t cols) {
  using A = compute_t<T>;
  const int64_t row = blockIdx.x;
  const int64_t t = load_as<int64_t>(targets.data, targets.dtype, row);
  const bool ignored = t == ignore_index;
  const A g = ignored ? A(0) : load_as<A>(dloss.data, dloss.dtype, row * dloss_stride);
  const A l = load_as<A>(lse.data, lse.dtype, row);
  const T* xr = logits + row * cols;
  T* dr = dlogits + row * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const A p = ignored ? A(0) : m_exp(convert<A>(xr[c]) - l);
    dr[c] = convert<T>(g * (p - (c == t ? A(1) : A(0))));
  }
}

// --- rotary embeddings -------------------------------------------------------------

// One thread per pair; off has the dims of x with the last one halved
// (stride doubled), so offset o is x[.., 2i] and o + pair_stride is x[.., 2i+1].
template <class T>
__global__ void rope_kernel(Offsets<2> off, const T* x, T* out, Buffer cos, Buffer sin,
                            int64_t pairs, int64_t x_pair_stride, int64_t out_pair_stride,
                            bool inverse) {
  using A = compute_t<T>;
  const int nd = off.ndim;
  const int64_t half = off.sizes[nd - 1], heads = off.sizes[nd - 2], steps = off.sizes[nd - 3];
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs; p += stride) {
    const int64_t i = p % half, t = (p / (half * heads)) % steps;
    int64_t o[2];
    off.compute<int64_t>(p, o);
    const A c = load_as<A>(cos.data, cos.dtype, t * half + i);
    const A s = inverse ? -load_as<A>(sin.data, sin.dtype, t * half + i)
                        : load_as<A>(sin.data, sin.dtype, t * half + i);
    const A x0 = convert<A>(x[o[1]]), x1 = convert<A>(x[o[1] + x_pair_stride]);
    out[o[0]] = convert<T>(x0 * c - x1 * s);
    out[o[0] + out_pair_stride] = convert<T>(x0 * s + x1 * c);
  }
}

// --- AdamW ----------------------------------------------------------------------------

__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v,
                                              const AdamWParams& hp) {
  m = hp.beta1 * m + (1.0f - hp.beta1) * g;
  v = hp.beta2 * v + (1.0f - hp.beta2) * g * g;
  p = p * hp.decay - hp.step_size * m / (sqrtf(v) * hp.inv_sqrt_bc2 + hp.eps);
}

__global__ void adamw_kernel(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                             int64_t n, AdamWParams hp, bool vectorised) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vectorised) {  // 16-byte accesses to all four arrays
    for (int64_t i = first; i < n / 4; i += stride) {
      float4 p = reinterpret_cast<float4*>(param)[i];
      const float4 g = reinterpret_cast<const float4*>(grad)[i];
      float4 m = reinterpret_cast<float4*>(exp_avg)[i];
      float4 v = reinterpret_cast<float4*>(exp_avg_sq)[i];
      adamw_element(p.x, g.x, m.x, v.x, hp);
      adamw_element(p.y, g.y, m.y, v.y, hp);
      adamw_element(p.z, g.z, m.z, v.z, hp);
      adamw_element(p.w, g.w, m.w, v.w, hp);
      reinterpret_cast<float4*>(param)[i] = p;
      reinterpret_cast<float4*>(exp_avg)[i] = m;
      reinterpret_cast<float4*>(exp_avg_sq)[i] = v;
    }
    done = n / 4 * 4;
  }
  for (int64_t i = done + first; i < n; i += stride)
    adamw_element(param[i], grad[i], exp_avg[i], exp_avg_sq[i], hp);
}

}  // namespace

void softmax(Buffer x, Buffer y, int64_t rows, int64_t cols, bool log, Stream stream) {
  if (rows == 0 || cols == 0) return;
  dispatch_floating(x.dtype, "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_kernel<T><<<unsigned(rows), threads_for_row(cols), 0, stream>>>(
        static_cast<const T*>(x.data), static_cast<T*>(y.data), cols, log);
  });
  SPMD_CUDA_CHECK_LAUNCH();
}

void softmax_backward(Buffer dy, Buffer y, Buffer dx, int64_t rows, int64_t cols, bool log,
                      Stream stream) {
  if (rows == 0 || cols == 0) return;
  dispatch_floating(dy.dtype, "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_backward_kernel<T><<<unsigned(rows), threads_for_row(cols), 0, stream>>>(
        static_cast<const T*>(dy.data), static_cast<const T*>(y.data), static_cast<T*>(dx.data),
        cols, log);
  });
  SPMD_CUDA_CHECK_LAUNCH();
}

void cross_entropy(Buffer logits, Buffer targets, int64_t ignore_index, Buffer loss, Buffer lse,
                   int64_t rows, int64_t cols, Stream stream) {
  if (rows == 0) return;
  dispatch_floating(logits.dtype, "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cross_entropy_kernel<T><<<unsigned(rows), threads_for_row(cols), 0, stream>>>(
        static_cast<const T*>(logits.data), targets, ignore_index, loss, lse, cols);
  });
  SPMD_CUDA_CHECK_LAUNCH();
}

void cross_entropy_backward(Buffer logits, Buffer targets, Buffer lse, Buffer dloss,
                            int64_t dloss_stride, int64_t ignore_index, Buffer dlogits,
                            int64_t rows, int64_t cols, Stream stream) {
  if (rows == 0 || cols == 0) return;
  dispatch_floating(logits.dtype, "cross_entropy_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cross_entropy_backward_kernel<T><<<unsigned(rows), threads_for_row(cols), 0, stream>>>(
        static_cast<const T*>(logits.data), targets, lse, dloss, dloss_stride, ignore_index,
        static_cast<T*>(dlogits.data), cols);
  });
  SPMD_CUDA_CHECK_LAUNCH();
}

void rope(const TensorArg& x, Buffer cos, Buffer sin, const TensorArg& out, bool inverse,
          Stream stream) {
  SPMD_CHECK(x.ndim >= 3 && x.sizes[x.ndim - 1] % 2 == 0 && x.dtype == out.dtype,
             "rope: expected x (..., T, H, D) with an even D, and out of x's dtype");
  const int nd = x.ndim;
  Offsets<2> off{};
  off.ndim = nd;
  for (int d = 0; d < nd; ++d) {
    off.sizes[d] = x.sizes[d];
    off.strides[0][d] = out.strides[d];
    off.strides[1][d] = x.strides[d];
  }
  off.sizes[nd - 1] /= 2;  // pairs
  off.strides[0][nd - 1] *= 2;
  off.strides[1][nd - 1] *= 2;
  const int64_t pairs = x.numel() / 2;
  if (pairs == 0) return;
  dispatch_floating(x.dtype, "rope", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rope_kernel<T><<<grid_for(pairs, 256), 256, 0, stream>>>(
        off, static_cast<const T*>(x.data), static_cast<T*>(out.data), cos, sin, pairs,
        x.strides[nd - 1], out.strides[nd - 1], inverse);
  });
  SPMD_CUDA_CHECK_LAUNCH();
}

void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                const AdamWParams& hp, Stream stream) {
  if (n == 0) return;
  bool vectorised = true;
  for (const void* p : {static_cast<const void*>(param), static_cast<const void*>(grad),
                        static_cast<const void*>(exp_avg), static_cast<const void*>(exp_avg_sq)})
    vectorised = vectorised && reinterpret_cast<uintptr_t>(p) % 16 == 0;
  adamw_kernel<<<grid_for((n + 3) / 4, 256), 256, 0, stream>>>(param, grad, exp_avg, exp_avg_sq, n,
                                                               hp, vectorised);
  SPMD_CUDA_CHECK_LAUNCH();
}

}  // namespace spmd::kernels
