// Attention (tensor/attention.h). On the CPU: ops::attention against naive
// loops in f64, and its backward against central finite differences of
// L = sum(out * dout). On the GPU [gpu]: the fused kernel against the
// composed default at a GPT-2-sized head and at lengths that are not
// multiples of the kernel's tiles, in bf16 and f16 by the normwise error that
// their roundings predict (see normwise_tolerance).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "gpu_test_util.h"
#include "tensor/attention.h"

namespace spmd::test {
namespace {

struct Shapes {
  int64_t B, H, Hkv, T, S, D;
};

// out[b,h,i,:] = sum_j softmax_j(scale q_i . k_j) v_j over the visible keys.
std::vector<double> naive_attention(const Shapes& n, const std::vector<double>& q,
                                    const std::vector<double>& k, const std::vector<double>& v,
                                    bool causal, double scale, std::vector<double>* lse) {
  std::vector<double> out(size_t(n.B * n.H * n.T * n.D), 0.0);
  for (int64_t b = 0; b < n.B; ++b)
    for (int64_t h = 0; h < n.H; ++h) {
      const int64_t hk = h / (n.H / n.Hkv);
      for (int64_t i = 0; i < n.T; ++i) {
        const double* qi = &q[size_t(((b * n.H + h) * n.T + i) * n.D)];
        std::vector<double> s(size_t(n.S), -std::numeric_limits<double>::infinity());
        double m = s[0];
        for (int64_t j = 0; j < n.S; ++j) {
          if (causal && j > i) continue;
          const double* kj = &k[size_t(((b * n.Hkv + hk) * n.S + j) * n.D)];
          double dot = 0;
          for (int64_t d = 0; d < n.D; ++d) dot += qi[d] * kj[d];
          s[size_t(j)] = scale * dot;
          m = std::max(m, s[size_t(j)]);
        }
        double sum = 0;
        for (double x : s) sum += std::exp(x - m);
        if (lse) (*lse)[size_t((b * n.H + h) * n.T + i)] = m + std::log(sum);
        double* o = &out[size_t(((b * n.H + h) * n.T + i) * n.D)];
        for (int64_t j = 0; j < n.S; ++j) {
          const double p = std::exp(s[size_t(j)] - m) / sum;
          const double* vj = &v[size_t(((b * n.Hkv + hk) * n.S + j) * n.D)];
          for (int64_t d = 0; d < n.D; ++d) o[d] += p * vj[d];
        }
      }
    }
  return out;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

TEST_CASE("attention on the CPU matches naive loops, forward and backward", "[cpu]") {
  for (bool causal : {true, false}) {
    const Shapes n{2, 4, 2, 5, causal ? 5 : 7, 3};  // grouped-query: 2 query heads per key head
    INFO("causal " << causal);
    const double scale = 0.7;
    const Shape sq{n.B, n.H, n.T, n.D}, skv{n.B, n.Hkv, n.S, n.D};
    auto q = uniform_values(sq.numel(), -1, 1, 1), k = uniform_values(skv.numel(), -1, 1, 2);
    auto v = uniform_values(skv.numel(), -1, 1, 3), dout = uniform_values(sq.numel(), -1, 1, 4);
    std::vector<double> lse_ref(size_t(n.B * n.H * n.T));
    const auto out_ref = naive_attention(n, q, k, v, causal, scale, &lse_ref);

    auto T = [](const std::vector<double>& x, const Shape& s) {
      return from_doubles(x, s, DType::kF64, kCpu);
    };
    const ops::AttentionResult r = ops::attention(T(q, sq), T(k, skv), T(v, skv), causal, scale);
    CHECK(differences(to_doubles(r.out), out_ref, 1e-12) == "");
    CHECK(differences(to_doubles(r.lse), lse_ref, 1e-6) == "");  // lse is f32

    // Gradients of L = <out, dout> by central differences, one input at a time.
    const ops::AttentionGrads g =
        ops::attention_backward(T(dout, sq), T(q, sq), T(k, skv), T(v, skv), r, causal, scale);
    const double eps = 1e-6;
    auto numeric = [&](std::vector<double>& x) {
      std::vector<double> grad(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        const double keep = x[i];
        x[i] = keep + eps;
        const double up = dot(naive_attention(n, q, k, v, causal, scale, nullptr), dout);
        x[i] = keep - eps;
        const double down = dot(naive_attention(n, q, k, v, causal, scale, nullptr), dout);
        x[i] = keep;
        grad[i] = (up - down) / (2 * eps);
      }
      return grad;
    };
    CHECK(differences(to_doubles(g.dq), numeric(q), 1e-6) == "");
    CHECK(differences(to_doubles(g.dk), numeric(k), 1e-6) == "");
    CHECK(differences(to_doubles(g.dv), numeric(v), 1e-6) == "");
  }
}

TEST_CASE("attention checks its inputs", "[cpu]") {
  const Tensor q = empty(kCpu, {1, 3, 4, 8}, DType::kF32),
               k = empty(kCpu, {1, 2, 4, 8}, DType::kF32);
  CHECK_THROWS_WITH(ops::attention(q, k, k, true), Catch::Contains("H a multiple of Hkv"));
  const Tensor k8 = empty(kCpu, {1, 3, 4, 6}, DType::kF32);
  CHECK_THROWS_AS(ops::attention(q, k8, k8, true), InvalidArgument);
}

// Runs attention forward and backward on the GPU with SPMD_ATTENTION set to
// `path` ("" for the automatic choice); returns out, lse, dq, dk, dv.
std::vector<std::vector<double>> run_gpu_attention(const char* path, const Tensor& q,
                                                   const Tensor& k, const Tensor& v,
                                                   const Tensor& dout, bool causal, double scale) {
  setenv("SPMD_ATTENTION", path, 1);
  Backend& gpu = backend_for(kGpu);
  const Shape sq = q.shape(), skv = k.shape();
  Tensor out = poisoned(kGpu, sq, q.dtype()),
         lse = poisoned(kGpu, {sq[0], sq[1], sq[2]}, DType::kF32);
  gpu.attention(q, k, v, causal, scale, out, lse);
  Tensor dq = poisoned(kGpu, sq, q.dtype()), dk = poisoned(kGpu, skv, q.dtype());
  Tensor dv = poisoned(kGpu, skv, q.dtype());
  gpu.attention_backward(dout, q, k, v, out, lse, causal, scale, dq, dk, dv);
  unsetenv("SPMD_ATTENTION");
  return {to_doubles(out), to_doubles(lse), to_doubles(dq), to_doubles(dk), to_doubles(dv)};
}

// The fused kernels against the composed version, which computes in f32 from
// the same inputs and rounds each result once to their dtype.
//
// In bf16 and f16 the difference comes from roundings the fused path adds.
// One rounding to a 16-bit type errs by at most u = 2^-11 ~ 4.9e-4 relative
// for f16 (2^-8 ~ 3.9e-3 for bf16), about 0.4u rms (half an ulp, uniform).
// The tensor-core kernels round P before O = P V and dV = P^T dO, and dS = P
// (dP - delta) before dK = dS^T Q and dQ = dS K; both fused paths take delta
// = rowsum(dO * O) from the rounded O. In a product sum_k a_k b_k whose a_k
// carry independent errors e_k, the error sum_k a_k b_k e_k and the value
// both grow as the root of the number of terms (the b_k, entries of dO, Q,
// K, V, have random signs), so each product is off by ~0.4u relative in
// norm at any T and S (100 keys per query, 4 x 100 queries per key in the
// f16 case). With the rounding of both results, in quadrature, that is
// sqrt(3) 0.4u ~ 0.7u for O and dV, a little more for dQ and dK (delta's
// error a 4th term). The check allows 2u: 9.8e-4 for f16. An output element
// left unwritten is NaN (poisoned) and fails it.
//
// Element by element no multiple of u holds at every size: under the causal
// mask row i of dQ sums i + 1 terms of size ~1 / (i + 1), so the first rows
// are several times the tensor's rms, and their values cancel where the
// roundings do not (a row of dS sums to zero; row 1 is dQ = scale dS_10 (K_0
// - K_1), its error ~ u scale |dS_10| |K|). That excess grows with T. f32 has
// no such rounding and keeps the element-wise comparison.
double normwise_tolerance(DType dtype) {
  const double u = dtype == DType::kF16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  return 2 * u;
}

TEST_CASE("fused attention on CUDA (tensor-core and f32 kernels) matches the composed version",
          "[gpu]") {
  SPMD_REQUIRE_GPU();
  struct Case {
    Shapes n;
    bool causal;
    DType dtype;
  };
  const Case cases[] = {{{2, 12, 12, 256, 256, 64}, true, DType::kBF16},
                        {{1, 4, 1, 100, 100, 128}, true, DType::kF16},
                        {{1, 4, 2, 130, 70, 64}, false, DType::kBF16},
                        {{1, 2, 2, 65, 97, 80}, false, DType::kF32}};
  const char* names[] = {"out", "lse", "dq", "dk", "dv"};
  for (const Case& c : cases) {
    const Shapes& n = c.n;
    const Shape sq{n.B, n.H, n.T, n.D}, skv{n.B, n.Hkv, n.S, n.D};
    auto make = [&](const Shape& s, uint64_t seed) {
      return from_doubles(uniform_values(s.numel(), -1, 1, seed), s, c.dtype, kGpu);
    };
    const Tensor q = make(sq, 11), k = make(skv, 12), v = make(skv, 13), dout = make(sq, 14);
    const double scale = 1 / std::sqrt(double(n.D));
    const auto ref = run_gpu_attention("composed", q, k, v, dout, c.causal, scale);
    for (const char* path : {"", "simt"}) {
      INFO("T " << n.T << ", S " << n.S << ", D " << n.D << ", " << c.dtype << ", path '" << path
                << "'");
      const auto got = run_gpu_attention(path, q, k, v, dout, c.causal, scale);
      CHECK(differences(got[1], ref[1], 1e-5) == "");  // lse, f32 in every path
      for (int r : {0, 2, 3, 4}) {
        INFO(names[r]);
        if (c.dtype == DType::kF32) {
          const double tol = tolerance(c.dtype) * (r == 0 ? 1 : 2);
          CHECK(differences(got[r], ref[r], tol) == "");
        } else {
          CHECK(relative_error(got[r], ref[r]) <= normwise_tolerance(c.dtype));
        }
      }
    }
  }
}

}  // namespace spmd::test
