// Fused scaled dot-product attention on the CPU, forward and backward.
//
// The default (tensor/attention.cpp) materializes every head's full (T, S)
// score matrix and masks half of it away. Here each (batch, head) is one
// task on one thread, walking its queries in blocks of kBlock rows; a block
// of causal queries i0..i1 sees only keys 0..i1, so only those scores are
// computed (about half the products and exponentials of the full matrix),
// and they live in a per-task scratch of kBlock x S, never in memory the
// size of B*H*T*S:
//
//   forward, per block:   s = scale q k^T      (rows x keys, one GEMM)
//                         p = softmax(s) row by row over the visible keys;
//                         lse = max + log(sum)
//                         out = p v             (one GEMM)
//   backward, per block:  p again from q and k (flash-attention's trade: a
//                         product recomputed instead of T*S saved)
//                         dv += p^T dout,  dp = dout v^T,
//                         ds = p (dp - rowsum(dout * out)),
//                         dq = scale ds k,  dk += scale ds^T q
//
// Grouped-query attention: the backward's task is one key head with the g
// query heads that read it, so its dk and dv sums stay on one thread. In f32
// the backward's p is exp(s - lse) with the forward's lse (one pass over the
// scores); in f64 it recomputes each row's max and sum instead, since lse is
// saved in f32 and f64 must stay exact for gradient checks. f32 and f64;
// bf16 and f16 run the f32 kernel on widened copies of one batch element's
// inputs at a time, each output rounded once (the default implementation also computes in f32,
// but materializes every head's full score matrix).
//
// Compiled once per CPU capability (kernels.h): these are KernelBackend's methods.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/backend_tensor.h"
#include "tensor/cpu/eigen_maps.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"

namespace spmd::cpu::SPMD_CPU_CAP {
namespace {

constexpr int64_t kBlock = 32;  // query rows per block

// Scratch rows start on 64-byte boundaries (row stride padded to 16
// elements, buffer aligned): Eigen's vectorized exp, max and sum split a row
// into a scalar head and a vector body by its address, so an address that
// varied from call to call would vary the rounding of the result. Aligned,
// the same inputs give bitwise the same outputs every time.
template <class T>
using Scratch = std::vector<T, Eigen::aligned_allocator<T>>;
inline int64_t padded(int64_t n) { return (n + 15) / 16 * 16; }

// One (batch, head) slice of a (B, H, T, D) tensor: its first row and row stride.
template <class T>
struct Rows {
  T* data;
  int64_t stride;
  T* row(int64_t i) const { return data + i * stride; }
};
template <class T>
Rows<T> head(const Tensor& t, int64_t b, int64_t h) {
  return {static_cast<T*>(t.raw_data()) + b * t.stride(0) + h * t.stride(1), t.stride(2)};
}

struct Geometry {
  int64_t B, H, T, D, Hkv, S, g;
  bool causal;
  // The keys query row i sees, and those any row of the block ending at i1 sees.
  int64_t visible(int64_t i) const { return causal ? std::min(i + 1, S) : S; }
  int64_t block_keys(int64_t i1) const { return causal ? std::min(i1, S) : S; }
};

// In place on each of `rows` rows of s (row stride ld, the block's first
// query i0): p = exp(s - max) / sum over the row's visible keys, 0 on the
// rest up to `keys`. Writes max + log(sum) to lse[r] when lse is given.
// (Eigen's array exp is vectorized; std::exp in a loop is not.)
template <class T>
void softmax_rows(T* s, int64_t ld, int64_t rows, int64_t keys, int64_t i0, const Geometry& n,
                  float* lse) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t vis = n.visible(i0 + r);
    ArrayMap<T> p(s + r * ld, vis);
    const T max = p.maxCoeff();
    p = (p - max).exp();
    const T sum = p.sum();
    p *= T(1) / sum;
    std::fill(s + r * ld + vis, s + r * ld + keys, T(0));
    if (lse) lse[r] = float(max + std::log(sum));
  }
}

// In place on each of `rows` rows of s, as softmax_rows, from the forward's
// lse instead of the row's own max and sum: p = exp(s - lse), one pass where
// softmax_rows makes four. (f32 only: lse is saved in f32, which would cut
// an f64 backward's precision to f32's.)
void probs_from_lse(float* s, int64_t ld, int64_t rows, int64_t keys, int64_t i0, const Geometry& n,
                    const float* lse) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t vis = n.visible(i0 + r);
    ArrayMap<float> p(s + r * ld, vis);
    p = (p - lse[r]).exp();
    std::fill(s + r * ld + vis, s + r * ld + keys, 0.0f);
  }
}

template <class T>
void forward_head(const Geometry& n, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& out, const Tensor& lse, int64_t b, int64_t h, T scale,
                  Scratch<T>& scratch) {
  const Rows<T> Q = head<T>(q, b, h), K = head<T>(k, b, h / n.g), V = head<T>(v, b, h / n.g);
  const Rows<T> O = head<T>(out, b, h);
  float* L = lse.data<float>() + (b * n.H + h) * n.T;
  const int64_t ld = padded(n.S);
  scratch.resize(size_t(kBlock * ld));
  for (int64_t i0 = 0; i0 < n.T; i0 += kBlock) {
    const int64_t rows = std::min(kBlock, n.T - i0), keys = n.block_keys(i0 + rows);
    T* s = scratch.data();
    gemm_rows<T>(false, true, rows, keys, n.D, scale, Q.row(i0), Q.stride, K.data, K.stride, T(0),
                 s, ld);
    softmax_rows(s, ld, rows, keys, i0, n, L + i0);
    gemm_rows<T>(false, false, rows, n.D, keys, T(1), s, ld, V.data, V.stride, T(0), O.row(i0),
                 O.stride);
  }
}

// Backward of one key head (b, kh) and the g query heads that read it.
template <class T>
void backward_kv_head(const Geometry& n, const Tensor& dout, const Tensor& q, const Tensor& k,
                      const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& dq,
                      const Tensor& dk, const Tensor& dv, int64_t b, int64_t kh, T scale,
                      Scratch<T>& scratch) {
  const Rows<T> K = head<T>(k, b, kh), V = head<T>(v, b, kh);
  const Rows<T> dK = head<T>(dk, b, kh), dV = head<T>(dv, b, kh);
  for (int64_t j = 0; j < n.S; ++j) {
    std::fill(dK.row(j), dK.row(j) + n.D, T(0));
    std::fill(dV.row(j), dV.row(j) + n.D, T(0));
  }
  const int64_t ld = padded(n.S);
  scratch.resize(size_t(2 * kBlock * ld + kBlock));
  for (int64_t h = kh * n.g; h < (kh + 1) * n.g; ++h) {
    const Rows<T> Q = head<T>(q, b, h), dO = head<T>(dout, b, h), O = head<T>(out, b, h);
    const Rows<T> dQ = head<T>(dq, b, h);
    const float* L = lse.data<float>() + (b * n.H + h) * n.T;
    for (int64_t i0 = 0; i0 < n.T; i0 += kBlock) {
      const int64_t rows = std::min(kBlock, n.T - i0), keys = n.block_keys(i0 + rows);
      T* p = scratch.data();
      T* dp = p + kBlock * ld;
      T* delta = dp + kBlock * ld;  // rowsum(dout * out) = rowsum(dp * p)
      gemm_rows<T>(false, true, rows, keys, n.D, scale, Q.row(i0), Q.stride, K.data, K.stride, T(0),
                   p, ld);
      if constexpr (std::is_same_v<T, float>) {
        probs_from_lse(p, ld, rows, keys, i0, n, L + i0);
      } else {
        softmax_rows<T>(p, ld, rows, keys, i0, n, nullptr);
      }
      for (int64_t r = 0; r < rows; ++r) {
        delta[r] = (ArrayMap<T>(dO.row(i0 + r), n.D) * ArrayMap<T>(O.row(i0 + r), n.D)).sum();
      }
      gemm_rows<T>(true, false, keys, n.D, rows, T(1), p, ld, dO.row(i0), dO.stride, T(1), dV.data,
                   dV.stride);  // dv += p^T dout
      gemm_rows<T>(false, true, rows, keys, n.D, T(1), dO.row(i0), dO.stride, V.data, V.stride,
                   T(0), dp, ld);           // dp = dout v^T
      for (int64_t r = 0; r < rows; ++r) {  // ds = p (dp - delta), in place of dp
        ArrayMap<T> ds(dp + r * ld, keys);
        ds = ArrayMap<T>(p + r * ld, keys) * (ds - delta[r]);
      }
      gemm_rows<T>(false, false, rows, n.D, keys, scale, dp, ld, K.data, K.stride, T(0), dQ.row(i0),
                   dQ.stride);  // dq = scale ds k
      gemm_rows<T>(true, false, keys, n.D, rows, scale, dp, ld, Q.row(i0), Q.stride, T(1), dK.data,
                   dK.stride);  // dk += scale ds^T q
    }
  }
}

Geometry geometry_of(const Tensor& q, const Tensor& k, bool causal) {
  return {q.size(0), q.size(1), q.size(2), q.size(3), k.size(1), k.size(2), q.size(1) / k.size(1),
          causal};
}

// The fused path takes f32/f64 tensors whose last dim is dense.
bool fusable(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t->dtype() != DType::kF32 && t->dtype() != DType::kF64) return false;
    if (t->size(3) > 1 && t->stride(3) != 1) return false;
  }
  return true;
}

// All of ts bf16 or f16 (what autocast hands attention): run in f32.
bool half_only(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (!is_half_float(t->dtype())) return false;
  return true;
}

// Batch element b of t, as a batch of one (a view): the half path widens one
// sequence's heads at a time, so its f32 copies stay that small.
Tensor batch_of(const Tensor& t, int64_t b) {
  Shape shape = t.shape();
  shape[0] = 1;
  return Tensor(t.storage(), shape, t.strides(), t.offset() + b * t.stride(0), t.dtype());
}

// Runs task(i, scratch) for i in [0, n), spread over threads, one scratch per thread.
template <class T, class F>
void for_each_task(int64_t n, const F& task) {
  const int threads = threads_for(n, 1);
  if (threads > 1) note_thread_team();
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    Scratch<T> scratch;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n; ++i) task(i, scratch);
  }
}

}  // namespace

void KernelBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                              double scale, const Tensor& out, const Tensor& lse) {
  if (half_only({&q, &k, &v, &out})) {  // the f32 kernel on widened copies, out rounded once
    for (int64_t b = 0; b < q.size(0); ++b) {
      const Tensor out_b = batch_of(out, b);
      const Tensor out32 = empty_on(*this, out.device(), out_b.shape(), DType::kF32);
      attention(widened_on(*this, batch_of(q, b)), widened_on(*this, batch_of(k, b)),
                widened_on(*this, batch_of(v, b)), causal, scale, out32, batch_of(lse, b));
      copy(out32, out_b);
    }
    return;
  }
  if (!fusable({&q, &k, &v, &out})) return Backend::attention(q, k, v, causal, scale, out, lse);
  const Geometry n = geometry_of(q, k, causal);
  if (n.B * n.H * n.T == 0 || n.S == 0) return;
  visit_float(q.dtype(), "attention", [&]<class T>() {
    for_each_task<T>(n.B * n.H, [&](int64_t i, Scratch<T>& scratch) {
      forward_head<T>(n, q, k, v, out, lse, i / n.H, i % n.H, T(scale), scratch);
    });
  });
}

void KernelBackend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& out, const Tensor& lse,
                                       bool causal, double scale, const Tensor& dq,
                                       const Tensor& dk, const Tensor& dv) {
  if (half_only({&dout, &q, &k, &v, &out, &dq, &dk, &dv})) {
    for (int64_t b = 0; b < q.size(0); ++b) {
      const Tensor dq_b = batch_of(dq, b), dk_b = batch_of(dk, b), dv_b = batch_of(dv, b);
      const Tensor dq32 = empty_on(*this, dq.device(), dq_b.shape(), DType::kF32);
      const Tensor dk32 = empty_on(*this, dk.device(), dk_b.shape(), DType::kF32);
      const Tensor dv32 = empty_on(*this, dv.device(), dv_b.shape(), DType::kF32);
      attention_backward(widened_on(*this, batch_of(dout, b)), widened_on(*this, batch_of(q, b)),
                         widened_on(*this, batch_of(k, b)), widened_on(*this, batch_of(v, b)),
                         widened_on(*this, batch_of(out, b)), batch_of(lse, b), causal, scale, dq32,
                         dk32, dv32);
      copy(dq32, dq_b);
      copy(dk32, dk_b);
      copy(dv32, dv_b);
    }
    return;
  }
  if (!fusable({&dout, &q, &k, &v, &out, &dq, &dk, &dv})) {
    return Backend::attention_backward(dout, q, k, v, out, lse, causal, scale, dq, dk, dv);
  }
  const Geometry n = geometry_of(q, k, causal);
  if (n.B * n.H * n.T == 0 || n.S == 0) {  // no query or no key: nothing flows
    fill(dq, 0);
    fill(dk, 0);
    fill(dv, 0);
    return;
  }
  visit_float(q.dtype(), "attention_backward", [&]<class T>() {
    for_each_task<T>(n.B * n.Hkv, [&](int64_t i, Scratch<T>& scratch) {
      backward_kv_head<T>(n, dout, q, k, v, out, lse, dq, dk, dv, i / n.Hkv, i % n.Hkv, T(scale),
                          scratch);
    });
  });
}

}  // namespace spmd::cpu::SPMD_CPU_CAP
