// Layer norm and RMS norm on the CPU, forward and backward, over the last dim
// of contiguous (rows, C) inputs.
//
//   layer norm: xhat = (x - mean) * rstd, y = xhat * w + b,
//               rstd = 1 / sqrt(var + eps) with the biased variance
//   backward:   g = dy * w; dx = rstd * (g - mean(g) - xhat * mean(g * xhat));
//               dw = sum over rows of dy * xhat, db = sum of dy
//   RMS norm:   the same without the mean: rstd = 1 / sqrt(mean(x^2) + eps),
//               dx = rstd * (g - xhat * mean(g * xhat))
//
// Rows are split over threads. The weight gradients sum over rows, so each
// thread sums its rows into its own partial, and the partials are added at
// the end (no atomics, and the same result for a given thread count).
//
// Compiled once per CPU capability (kernels.h): these are KernelBackend's methods.
#include <Eigen/Core>
#include <cmath>

#include "tensor/cpu/eigen_maps.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"

namespace spmd::cpu::SPMD_CPU_CAP {
namespace {

// A norm costs a few cycles per element (no exp): twice the costly grain.
constexpr int64_t kNormGrain = 2 * kCostlyGrain;

// A (C) parameter as its compute type (nullptr when undefined).
template <class T, class C = compute_t<T>>
const C* param_in(const Tensor& p, std::vector<C>& buf) {
  return p.defined() ? row_in(p.data<T>(), p.numel(), buf) : nullptr;
}

// y = xhat * w + b for one row; w and b may be null.
template <class C>
void affine_row(const ConstArrayMap<C>& xhat, const C* w, const C* b, ArrayMap<C>& y) {
  const int64_t n = xhat.size();
  if (w && b)
    y = xhat * ConstArrayMap<C>(w, n) + ConstArrayMap<C>(b, n);
  else if (w)
    y = xhat * ConstArrayMap<C>(w, n);
  else if (b)
    y = xhat + ConstArrayMap<C>(b, n);
  else
    y = xhat;
}

// Adds the per-thread partials [t][n] into dst (written, not accumulated).
template <class T, class C>
void sum_partials(const std::vector<C>& partial, int threads, int64_t n, const Tensor& dst) {
  if (!dst.defined()) return;
  T* d = dst.data<T>();
  for (int64_t j = 0; j < n; ++j) {
    C s = 0;
    for (int t = 0; t < threads; ++t) s += partial[size_t(t) * n + j];
    d[j] = T(s);
  }
}

// The norm backward shared by both norms (layer norm when mean != nullptr).
template <class T>
void norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                   const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                   const Tensor& dbias) {
  using C = compute_t<T>;
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  std::vector<C> wbuf;
  const C* w = param_in<T>(weight, wbuf);
  const C* mp = mean.defined() ? mean.data<C>() : nullptr;
  const C* rp = rstd.data<C>();
  const int threads = std::max(1, threads_for(rows, row_grain(n, kNormGrain)));
  std::vector<C> dw(size_t(threads) * n, C(0)), db(size_t(threads) * n, C(0));
  run_on_threads(rows, threads, [&](int t, int64_t begin, int64_t end) {
    std::vector<C> xbuf, dybuf, dxbuf, xhat_buf(n), g_buf(n);
    ArrayMap<C> dw_t(dw.data() + size_t(t) * n, n), db_t(db.data() + size_t(t) * n, n);
    for (int64_t r = begin; r < end; ++r) {
      const ConstArrayMap<C> xr(row_in(x.data<T>() + r * n, n, xbuf), n);
      const ConstArrayMap<C> dyr(row_in(dy.data<T>() + r * n, n, dybuf), n);
      ArrayMap<C> xhat(xhat_buf.data(), n), g(g_buf.data(), n);
      xhat = (xr - (mp ? mp[r] : C(0))) * rp[r];
      if (w)
        g = dyr * ConstArrayMap<C>(w, n);
      else
        g = dyr;
      if (dweight.defined()) dw_t += dyr * xhat;  // before dx is written: dx may be dy
      if (dbias.defined()) db_t += dyr;
      C* d = row_buf(dx.data<T>() + r * n, n, dxbuf);
      ArrayMap<C> dxr(d, n);
      const C mean_gx = (g * xhat).sum() / C(n);
      if (mp)
        dxr = rp[r] * (g - g.sum() / C(n) - xhat * mean_gx);
      else
        dxr = rp[r] * (g - xhat * mean_gx);
      row_out(dx.data<T>() + r * n, n, d);
    }
  });
  sum_partials<T>(dw, threads, n, dweight);
  sum_partials<T>(db, threads, n, dbias);
}

}  // namespace

void KernelBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                               double eps, const Tensor& y, const Tensor& mean,
                               const Tensor& rstd) {
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  visit_floating(x.dtype(), "layer_norm", [&]<class T>() {
    using C = compute_t<T>;
    std::vector<C> wbuf, bbuf;
    const C* w = param_in<T>(weight, wbuf);
    const C* b = param_in<T>(bias, bbuf);
    C* mp = mean.data<C>();
    C* rp = rstd.data<C>();
    parallel_for(rows, row_grain(n, kNormGrain), [&](int64_t begin, int64_t end) {
      std::vector<C> xbuf, ybuf;
      for (int64_t r = begin; r < end; ++r) {
        const ConstArrayMap<C> xr(row_in(x.data<T>() + r * n, n, xbuf), n);
        mp[r] = xr.sum() / C(n);
        const C var = (xr - mp[r]).square().sum() / C(n);  // two passes: no cancellation
        rp[r] = C(1) / std::sqrt(var + C(eps));
        C* out = row_buf(y.data<T>() + r * n, n, ybuf);
        ArrayMap<C> yr(out, n);
        yr = (xr - mp[r]) * rp[r];
        affine_row<C>(ConstArrayMap<C>(out, n), w, b, yr);
        row_out(y.data<T>() + r * n, n, out);
      }
    });
  });
}

void KernelBackend::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                        const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                                        const Tensor& dweight, const Tensor& dbias) {
  visit_floating(x.dtype(), "layer_norm_backward", [&]<class T>() {
    norm_backward<T>(dy, x, weight, mean, rstd, dx, dweight, dbias);
  });
}

void KernelBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                             const Tensor& rstd) {
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  visit_floating(x.dtype(), "rms_norm", [&]<class T>() {
    using C = compute_t<T>;
    std::vector<C> wbuf;
    const C* w = param_in<T>(weight, wbuf);
    C* rp = rstd.data<C>();
    parallel_for(rows, row_grain(n, kNormGrain), [&](int64_t begin, int64_t end) {
      std::vector<C> xbuf, ybuf;
      for (int64_t r = begin; r < end; ++r) {
        const ConstArrayMap<C> xr(row_in(x.data<T>() + r * n, n, xbuf), n);
        rp[r] = C(1) / std::sqrt(xr.square().sum() / C(n) + C(eps));
        C* out = row_buf(y.data<T>() + r * n, n, ybuf);
        ArrayMap<C> yr(out, n);
        yr = xr * rp[r];
        affine_row<C>(ConstArrayMap<C>(out, n), w, nullptr, yr);
        row_out(y.data<T>() + r * n, n, out);
      }
    });
  });
}

void KernelBackend::rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                      const Tensor& rstd, const Tensor& dx, const Tensor& dweight) {
  visit_floating(x.dtype(), "rms_norm_backward", [&]<class T>() {
    norm_backward<T>(dy, x, weight, Tensor(), rstd, dx, dweight, Tensor());
  });
}

}  // namespace spmd::cpu::SPMD_CPU_CAP
