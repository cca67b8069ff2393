// The fused transformer ops on the CPU that work row by row along the last
// dim: softmax and log-softmax with their backward, cross-entropy with its
// backward, and rotary embeddings. (Layer and RMS norm are in norm.cpp.)
//
// Every input is contiguous, so a row is a dense run; rows are split over
// threads, each row computed in f32 (f64 for f64) with Eigen's vectorized exp
// and log. A softmax row is max, exp(x - max) and its sum, a scale: the max
// keeps exp from overflowing.
//
// Compiled once per CPU capability (kernels.h): these are KernelBackend's methods.
#include <Eigen/Core>
#include <cmath>

#include "tensor/cpu/eigen_maps.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"

namespace spmd::cpu::SPMD_CPU_CAP {
namespace {

template <class C>
void softmax_row(const C* px, C* py, int64_t n, bool log) {
  const ConstArrayMap<C> x(px, n);
  ArrayMap<C> y(py, n);
  const C max = x.maxCoeff();
  if (log) {  // (x - max) - log(sum): no rounding of a large lse before the subtraction
    const C log_sum = std::log((x - max).exp().sum());
    y = (x - max) - log_sum;
  } else {
    y = (x - max).exp();
    y *= C(1) / y.sum();
  }
}

template <class C>
void softmax_backward_row(const C* pdy, const C* py, C* pdx, int64_t n, bool log) {
  const ConstArrayMap<C> dy(pdy, n), y(py, n);
  ArrayMap<C> dx(pdx, n);
  if (log) {
    dx = dy - y.exp() * dy.sum();  // y = log p: dx = dy - p sum(dy)
  } else {
    dx = y * (dy - (dy * y).sum());  // dx = p (dy - <dy, p>)
  }
}

// Throws unless every target is ignore_index or a class in [0, V).
void check_targets(const Tensor& targets, int64_t V, int64_t ignore_index) {
  const int64_t* t = targets.data<int64_t>();
  for (int64_t n = 0; n < targets.numel(); ++n) {
    SPMD_CHECK(t[n] == ignore_index || (t[n] >= 0 && t[n] < V), "cross_entropy: target ", t[n],
               " of row ", n, " is out of range for ", V, " classes (ignore_index is ",
               ignore_index, ")");
  }
}

}  // namespace

void KernelBackend::softmax(const Tensor& x, const Tensor& out, bool log) {
  const int64_t n = x.ndim() ? x.size(-1) : 1, rows = n ? x.numel() / n : 0;
  visit_floating(x.dtype(), "softmax", [&]<class T>() {
    using C = compute_t<T>;
    const T* xp = x.data<T>();
    T* yp = out.data<T>();
    parallel_for(rows, row_grain(n, kCostlyGrain), [&](int64_t begin, int64_t end) {
      std::vector<C> xbuf, ybuf;
      for (int64_t r = begin; r < end; ++r) {
        C* y = row_buf(yp + r * n, n, ybuf);
        softmax_row<C>(row_in(xp + r * n, n, xbuf), y, n, log);
        row_out(yp + r * n, n, y);
      }
    });
  });
}

void KernelBackend::softmax_backward(const Tensor& dy, const Tensor& y, const Tensor& dx,
                                     bool log) {
  const int64_t n = y.ndim() ? y.size(-1) : 1, rows = n ? y.numel() / n : 0;
  visit_floating(y.dtype(), "softmax_backward", [&]<class T>() {
    using C = compute_t<T>;
    const T* dyp = dy.data<T>();
    const T* yp = y.data<T>();
    T* dxp = dx.data<T>();
    parallel_for(rows, row_grain(n, kCostlyGrain), [&](int64_t begin, int64_t end) {
      std::vector<C> dybuf, ybuf, dxbuf;
      for (int64_t r = begin; r < end; ++r) {
        C* d = row_buf(dxp + r * n, n, dxbuf);
        softmax_backward_row<C>(row_in(dyp + r * n, n, dybuf), row_in(yp + r * n, n, ybuf), d, n,
                                log);
        row_out(dxp + r * n, n, d);
      }
    });
  });
}

void KernelBackend::cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                  const Tensor& loss, const Tensor& lse) {
  const int64_t N = logits.size(0), V = logits.size(1);
  check_targets(targets, V, ignore_index);
  const int64_t* t = targets.data<int64_t>();
  visit_floating(logits.dtype(), "cross_entropy", [&]<class T>() {
    using C = compute_t<T>;
    const T* xp = logits.data<T>();
    C* lossp = loss.data<C>();
    C* lsep = lse.data<C>();
    parallel_for(N, row_grain(V, kCostlyGrain), [&](int64_t begin, int64_t end) {
      std::vector<C> xbuf;
      for (int64_t n = begin; n < end; ++n) {
        const ConstArrayMap<C> x(row_in(xp + n * V, V, xbuf), V);
        const C max = V ? x.maxCoeff() : C(0);
        const C log_sum = std::log((x - max).exp().sum());
        lsep[n] = max + log_sum;
        lossp[n] = t[n] == ignore_index ? C(0) : (max - x[t[n]]) + log_sum;
      }
    });
  });
}

void KernelBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                           const Tensor& lse, const Tensor& dloss,
                                           int64_t ignore_index, const Tensor& dlogits) {
  const int64_t N = logits.size(0), V = logits.size(1);
  check_targets(targets, V, ignore_index);
  const int64_t* t = targets.data<int64_t>();
  visit_floating(logits.dtype(), "cross_entropy_backward", [&]<class T>() {
    using C = compute_t<T>;
    const T* xp = logits.data<T>();
    const C* lsep = lse.data<C>();
    const C* dlp = dloss.data<C>();
    T* dxp = dlogits.data<T>();
    parallel_for(N, row_grain(V, kCostlyGrain), [&](int64_t begin, int64_t end) {
      std::vector<C> xbuf, dbuf;
      for (int64_t n = begin; n < end; ++n) {
        C* d = row_buf(dxp + n * V, V, dbuf);
        ArrayMap<C> dx(d, V);
        if (t[n] == ignore_index) {
          dx.setZero();
        } else {
          const ConstArrayMap<C> x(row_in(xp + n * V, V, xbuf), V);
          dx = dlp[n] * (x - lsep[n]).exp();  // dloss * softmax
          dx[t[n]] -= dlp[n];
        }
        row_out(dxp + n * V, V, d);
      }
    });
  });
}

void KernelBackend::rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out,
                         bool inverse) {
  SPMD_CHECK(x.ndim() >= 3, "rope: expected x of shape (..., T, H, D), got ", x.shape());
  SPMD_CHECK(out.is_contiguous(), "rope: expected a contiguous out");
  const int64_t T_ = x.size(-3), H = x.size(-2), D = x.size(-1), half = D / 2;
  const int64_t rows = D ? x.numel() / D : 0;
  // Where row r (of the flattened leading dims) and element j of x lie: x
  // may be a strided view, (B, T, H, D) of (B, H, T, D) memory.
  const int nd = x.ndim();
  std::vector<int64_t> sizes(size_t(nd - 1)), strides(size_t(nd - 1));
  for (int d = 0; d < nd - 1; ++d) sizes[size_t(d)] = x.size(d), strides[size_t(d)] = x.stride(d);
  const int64_t step = x.stride(-1);
  auto row_offset = [sizes, strides](int64_t r) {
    int64_t offset = 0;
    for (size_t d = sizes.size(); d-- > 0;) {
      offset += (r % sizes[d]) * strides[d];
      r /= sizes[d];
    }
    return offset;
  };
  visit_floating(x.dtype(), "rope", [&]<class T>() {
    using C = compute_t<T>;
    const T* xp = x.data<T>();
    T* op = out.data<T>();
    const C* cp = cos.data<C>();
    const C* sp = sin.data<C>();
    const C sign = inverse ? C(-1) : C(1);
    // The lambda captures by value: no aliasing.
    parallel_for(rows, row_grain(D, kCostlyGrain), [=](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t t = (r / H) % T_;
        const T* xr = xp + row_offset(r);
        T* orow = op + r * D;
        for (int64_t i = 0; i < half; ++i) {
          const C c = cp[t * half + i], s = sign * sp[t * half + i];
          const C x0 = C(xr[2 * i * step]), x1 = C(xr[(2 * i + 1) * step]);
          orow[2 * i] = T(x0 * c - x1 * s);
          orow[2 * i + 1] = T(x0 * s + x1 * c);
        }
      }
    });
  });
}

}  // namespace spmd::cpu::SPMD_CPU_CAP
