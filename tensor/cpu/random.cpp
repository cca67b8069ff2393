// Random draws and the fused AdamW step on the CPU.
//
// Random tensors follow tensor/random.h exactly: element i comes from lane
// i % 4 of philox4x32(seed, offset + i / 4), so threads split the tensor into
// blocks of four elements and need no shared state. Normal values pair the
// lanes (0, 1) and (2, 3) of each block through Box-Muller.
#include "tensor/random.h"

#include <cmath>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/loops.h"

namespace spmd::cpu {
namespace {

constexpr float kTwoPow24Inv = 1.0f / 16777216.0f;  // 2^-24
constexpr float kTwoPi = 6.28318530717958647692f;

// Writes the elements [4 b, 4 b + 4) of an n-element tensor for every block
// b, with value(lanes, k) the k-th element of a block.
template <class T, class F>
void fill_blocks(T* out, int64_t n, uint64_t seed, uint64_t offset, const F& value) {
  const int64_t blocks = (n + 3) / 4;
  parallel_for(blocks, 2048, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const std::array<uint32_t, 4> r = philox4x32(seed, offset + uint64_t(b));
      const int64_t base = 4 * b, m = std::min<int64_t>(4, n - base);
      for (int64_t k = 0; k < m; ++k) out[base + k] = value(r, int(k));
    }
  });
}

struct AdamWConstants {
  float beta1, beta2, eps, decay, step_size, inv_sqrt_bias2;
};

// The update over n elements; restrict lets the compiler vectorize it (sqrt
// and division included) without checking for overlap.
void adamw_range(float* __restrict p, const float* __restrict g, float* __restrict m,
                 float* __restrict v, int64_t n, const AdamWConstants& k) {
  for (int64_t i = 0; i < n; ++i) {
    m[i] = k.beta1 * m[i] + (1.0f - k.beta1) * g[i];
    v[i] = k.beta2 * v[i] + (1.0f - k.beta2) * g[i] * g[i];
    p[i] = p[i] * k.decay - k.step_size * m[i] / (std::sqrt(v[i]) * k.inv_sqrt_bias2 + k.eps);
  }
}

}  // namespace

void CpuBackend::random_uniform(const Tensor& out, double low, double high, uint64_t seed,
                                uint64_t offset) {
  SPMD_CHECK(out.is_contiguous(), "random_uniform: the output must be contiguous");
  visit_dtype(out.dtype(), [&]<class T>() {
    T* o = static_cast<T*>(out.raw_data());
    if constexpr (std::is_same_v<T, bool>) {
      SPMD_THROW(InvalidArgument, "random_uniform: cannot draw bool values");
    } else if constexpr (std::is_integral_v<T>) {
      const int64_t lo = int64_t(low);
      const uint64_t range = uint64_t(int64_t(high) - lo);
      fill_blocks(o, out.numel(), seed, offset, [&](const std::array<uint32_t, 4>& r, int k) {
        return T(lo + int64_t((uint64_t(r[k]) * range) >> 32));
      });
    } else {
      // lo + width u as one fused multiply-add, here and in the CUDA kernel
      // (kernels/random.cu): written as an fma on both sides, the value
      // cannot depend on whether a compiler contracts a * b + c.
      using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const C lo = C(low), width = C(high - low);
      fill_blocks(o, out.numel(), seed, offset, [&](const std::array<uint32_t, 4>& r, int k) {
        const C u = C(float(r[k] >> 8) * kTwoPow24Inv);  // exact: 24 bits times 2^-24
        return T(std::fma(width, u, lo));
      });
    }
  });
}

void CpuBackend::random_normal(const Tensor& out, double mean, double std, uint64_t seed,
                               uint64_t offset) {
  SPMD_CHECK(out.is_contiguous(), "random_normal: the output must be contiguous");
  visit_floating(out.dtype(), "random_normal", [&]<class T>() {
    const float m = float(mean), s = float(std);
    fill_blocks(static_cast<T*>(out.raw_data()), out.numel(), seed, offset,
                [&](const std::array<uint32_t, 4>& r, int k) {
                  const int j = k & ~1;  // the pair (j, j + 1) this lane belongs to
                  const float u1 = float(r[j] >> 8) * kTwoPow24Inv + 0.5f * kTwoPow24Inv;
                  const float u2 = float(r[j + 1] >> 8) * kTwoPow24Inv;
                  const float rad = std::sqrt(-2.0f * std::log(u1));
                  const float z =
                      (k & 1) ? rad * std::sin(kTwoPi * u2) : rad * std::cos(kTwoPi * u2);
                  return T(std::fma(s, z, m));  // as the CUDA kernel: m + s z, one rounding
                });
  });
}

void CpuBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, const AdamWStep& hp) {
  for (const Tensor* t : {&param, &grad, &exp_avg, &exp_avg_sq}) {
    SPMD_CHECK(t->dtype() == DType::kF32 && t->is_contiguous() && t->shape() == param.shape(),
               "adamw_step: expected contiguous f32 tensors of shape ", param.shape(), ", got ",
               dtype_name(t->dtype()), " ", t->shape());
  }
  const AdamWConstants k{float(hp.beta1),
                         float(hp.beta2),
                         float(hp.eps),
                         float(1.0 - hp.lr * hp.weight_decay),
                         float(hp.lr / (1.0 - std::pow(hp.beta1, double(hp.step)))),
                         float(1.0 / std::sqrt(1.0 - std::pow(hp.beta2, double(hp.step))))};
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  parallel_for(param.numel(), kGrain / 4, [&](int64_t begin, int64_t end) {
    adamw_range(p + begin, g + begin, m + begin, v + begin, end - begin, k);
  });
}

}  // namespace spmd::cpu
