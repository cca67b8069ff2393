// The fused transformer ops against naive f64 loops, and their backward
// passes against central finite differences of those naive loops (so the
// gradients are checked against something that shares no code with them).
#include <cmath>

#include "reference.h"

using namespace spmd;
using namespace spmd::test;

namespace {

using Vec = std::vector<double>;

// Naive forwards on one row.
Vec softmax_ref(const Vec& x, bool log) {
  double m = -INFINITY, s = 0;
  for (double v : x) m = std::max(m, v);
  for (double v : x) s += std::exp(v - m);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = log ? x[i] - m - std::log(s) : std::exp(x[i] - m) / s;
  return y;
}

Vec norm_ref(const Vec& x, const Vec& w, const Vec& b, double eps, bool rms) {
  const double n = double(x.size());
  double mean = 0, var = 0;
  for (double v : x) mean += v / n;
  if (rms) mean = 0;
  for (double v : x) var += (v - mean) * (v - mean) / n;
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = (x[i] - mean) / std::sqrt(var + eps) * (w.empty() ? 1 : w[i]) + (b.empty() ? 0 : b[i]);
  return y;
}

// d/dp of sum(dy * f(p)) by central differences, for each element of p.
Vec finite_diff(Vec p, const Vec& dy, const std::function<Vec(const Vec&)>& f, double h = 1e-6) {
  Vec grad(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const double keep = p[i];
    p[i] = keep + h;
    const Vec up = f(p);
    p[i] = keep - h;
    const Vec down = f(p);
    p[i] = keep;
    double g = 0;
    for (size_t j = 0; j < dy.size(); ++j) g += dy[j] * (up[j] - down[j]) / (2 * h);
    grad[i] = g;
  }
  return grad;
}

Ref as_ref(const Shape& shape, const Vec& v) {
  Ref r(shape);
  r.v = v;
  return r;
}

Vec rows_slice(const Vec& v, int64_t r, int64_t n) {
  return Vec(v.begin() + r * n, v.begin() + (r + 1) * n);
}

}  // namespace

TEST_CASE("softmax and log_softmax match a naive loop along any dim", "[nn][softmax]") {
  std::mt19937 rng(30);
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16})
    for (bool log : {false, true})
      for (int dim : {-1, 0, 1}) {
        // Large logits: the max subtraction must keep exp finite.
        const Tensor x = random_tensor(rng, {5, 7, 9}, dt, Layout::kTransposed, -50, 50);
        const Tensor moved = ops::contiguous(ops::transpose(x, dim, -1));
        const Ref rx(moved);
        const int64_t n = moved.size(-1);
        Ref want(moved.shape());
        for (int64_t r = 0; r < rx.numel() / n; ++r) {
          const Vec y = softmax_ref(rows_slice(rx.v, r, n), log);
          std::copy(y.begin(), y.end(), want.v.begin() + r * n);
        }
        const Tensor got = log ? ops::log_softmax(x, dim) : ops::softmax(x, dim);
        check_close(ops::contiguous(ops::transpose(got, dim, -1)), want, rtol_for(dt) * 4,
                    dt == DType::kBF16 ? 0.3 : 1e-6,
                    str_cat(log ? "log_softmax " : "softmax ", dtype_name(dt), " dim ", dim));
      }
  CHECK(ops::softmax(ops::zeros({3, 0})).shape() == Shape{3, 0});
}

TEST_CASE("softmax_backward matches finite differences", "[nn][softmax]") {
  std::mt19937 rng(31);
  for (bool log : {false, true}) {
    const Tensor x = random_tensor(rng, {3, 6}, DType::kF64, Layout::kContiguous);
    const Tensor dy = random_tensor(rng, {3, 6}, DType::kF64, Layout::kContiguous);
    const Tensor y = log ? ops::log_softmax(x) : ops::softmax(x);
    const Tensor dx = ops::softmax_backward(dy, y, -1, log);
    const Ref rx(x), rdy(dy);
    Ref want({3, 6});
    for (int64_t r = 0; r < 3; ++r) {
      const Vec g = finite_diff(rows_slice(rx.v, r, 6), rows_slice(rdy.v, r, 6),
                                [&](const Vec& p) { return softmax_ref(p, log); });
      std::copy(g.begin(), g.end(), want.v.begin() + r * 6);
    }
    check_close(dx, want, 1e-6, 1e-8, log ? "log_softmax backward" : "softmax backward");
  }
}

TEST_CASE("layer_norm and rms_norm forward and backward", "[nn][norm]") {
  std::mt19937 rng(32);
  const int64_t R = 4, C = 10;
  for (bool rms : {false, true})
    for (bool affine : {false, true}) {
      const Tensor x = random_tensor(rng, {2, 2, C}, DType::kF64, Layout::kStrided, -1, 3);
      const Tensor w = random_tensor(rng, {C}, DType::kF64, Layout::kContiguous);
      const Tensor b = random_tensor(rng, {C}, DType::kF64, Layout::kContiguous);
      const Tensor dy = random_tensor(rng, {2, 2, C}, DType::kF64, Layout::kContiguous);
      const double eps = 1e-5;
      const Tensor wt = affine ? w : Tensor(), bt = affine && !rms ? b : Tensor();
      const ops::NormResult fwd = rms ? ops::rms_norm(x, wt, eps) : ops::layer_norm(x, wt, bt, eps);
      const ops::NormGrads grads = rms ? ops::rms_norm_backward(dy, x, wt, fwd)
                                       : ops::layer_norm_backward(dy, x, wt, fwd, bt.defined());
      const Vec rx = Ref(x).v, rw = affine ? Ref(w).v : Vec(), rb = bt.defined() ? Ref(b).v : Vec();
      const Vec rdy = Ref(dy).v;
      Vec y, dx, dw(size_t(C), 0), db(size_t(C), 0);
      for (int64_t r = 0; r < R; ++r) {
        const Vec xr = rows_slice(rx, r, C), dyr = rows_slice(rdy, r, C);
        const Vec yr = norm_ref(xr, rw, rb, eps, rms);
        y.insert(y.end(), yr.begin(), yr.end());
        const Vec g =
            finite_diff(xr, dyr, [&](const Vec& p) { return norm_ref(p, rw, rb, eps, rms); });
        dx.insert(dx.end(), g.begin(), g.end());
        if (affine) {
          const Vec gw =
              finite_diff(rw, dyr, [&](const Vec& p) { return norm_ref(xr, p, rb, eps, rms); });
          for (int64_t j = 0; j < C; ++j) dw[j] += gw[j], db[j] += dyr[j];
        }
      }
      const std::string what = str_cat(rms ? "rms_norm" : "layer_norm", affine ? " affine" : "");
      check_close(fwd.y, as_ref({2, 2, C}, y), 1e-10, 1e-10, what + " y");
      CHECK(fwd.rstd.shape() == Shape{2, 2});
      CHECK(fwd.rstd.dtype() == DType::kF64);
      check_close(grads.dx, as_ref({2, 2, C}, dx), 1e-6, 1e-7, what + " dx");
      CHECK(grads.dweight.defined() == affine);
      if (affine) check_close(grads.dweight, as_ref({C}, dw), 1e-6, 1e-7, what + " dweight");
      if (bt.defined()) check_close(grads.dbias, as_ref({C}, db), 1e-12, 1e-12, what + " dbias");
    }
}

TEST_CASE("norms in f32 and bf16 stay close to f64, and threads agree", "[nn][norm]") {
  std::mt19937 rng(33);
  const Tensor x = random_tensor(rng, {512, 96}, DType::kF64, Layout::kContiguous);
  const Tensor w = random_tensor(rng, {96}, DType::kF64, Layout::kContiguous);
  const Tensor dy = random_tensor(rng, {512, 96}, DType::kF64, Layout::kContiguous);
  const ops::NormResult f64 = ops::layer_norm(x, w, w);
  const ops::NormGrads g64 = ops::layer_norm_backward(dy, x, w, f64, true);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const Tensor xd = ops::to(x, dt), wd = ops::to(w, dt), dyd = ops::to(dy, dt);
    const ops::NormResult f = ops::layer_norm(xd, wd, wd);
    const ops::NormGrads g = ops::layer_norm_backward(dyd, xd, wd, f, true);
    const double tol = dt == DType::kF32 ? 1e-4 : 5e-2;
    CHECK(f.rstd.dtype() == DType::kF32);
    CHECK(ops::allclose(f.y, ops::to(f64.y, dt), tol, tol));
    CHECK(ops::allclose(g.dx, ops::to(g64.dx, dt), tol, tol));
    CHECK(ops::allclose(ops::to(g.dweight, DType::kF64), g64.dweight, tol, tol * 50));
  }
}

TEST_CASE("cross_entropy and its backward, with ignored rows", "[nn][loss]") {
  std::mt19937 rng(34);
  const int64_t N = 6, V = 11;
  const Tensor logits = random_tensor(rng, {N, V}, DType::kF64, Layout::kTransposed, -4, 4);
  const Tensor targets = ops::from_vector<int64_t>({3, 0, -100, 10, 7, -100}, {N});
  const ops::CrossEntropyResult ce = ops::cross_entropy(logits, targets);
  const Vec rl = Ref(logits).v;
  const std::vector<int64_t> t = ops::to_vector<int64_t>(targets);
  auto loss_of = [&](const Vec& l) {
    double total = 0;
    for (int64_t n = 0; n < N; ++n)
      if (t[n] != -100) total -= softmax_ref(rows_slice(l, n, V), true)[size_t(t[n])];
    return Vec{total / 4};
  };
  CHECK(ce.count.item<int64_t>() == 4);
  CHECK(ce.loss.ndim() == 0);
  CHECK(ce.loss.item<double>() == Approx(loss_of(rl)[0]).epsilon(1e-12));
  const Tensor dlogits = ops::cross_entropy_backward(logits, targets, ce, 2.0);
  check_close(dlogits, as_ref({N, V}, finite_diff(rl, {2.0}, loss_of)), 1e-6, 1e-8,
              "cross_entropy backward");
  // dloss as a tensor (what autograd passes: nothing is read back) gives the same.
  const Tensor dloss = ops::full(Shape{}, 2.0, {DType::kF32});
  CHECK(ops::allclose(ops::cross_entropy_backward(logits, targets, ce, dloss), dlogits, 1e-12, 0));
  // An f32 loss of 16-bit logits (autocast's request): the rows are summed in f32 anyway.
  const Tensor bf16_logits = ops::to(logits, DType::kBF16);
  const Tensor f32_loss = ops::cross_entropy(bf16_logits, targets, -100, DType::kF32).loss;
  CHECK(f32_loss.dtype() == DType::kF32);
  CHECK(f32_loss.item<double>() ==
        Approx(ops::cross_entropy(ops::to(bf16_logits, DType::kF64), targets).loss.item<double>())
            .epsilon(1e-6));
  CHECK_THROWS_WITH(
      ops::cross_entropy(logits, ops::from_vector<int64_t>({0, 1, 2, 3, 4, 11}, {N})),
      Catch::Contains("cross_entropy: target 11 of row 5 is out of range for 11 classes"));
  CHECK_THROWS_WITH(ops::cross_entropy(logits, ops::zeros({N})),
                    Catch::Contains("must be integers"));
  const Tensor all_ignored = ops::full({N}, -100, {DType::kI64});
  CHECK(std::isnan(ops::cross_entropy(logits, all_ignored).loss.item<double>()));
}

TEST_CASE("rope rotates pairs by t * theta^(-2i/D) and inverse undoes it", "[nn][rope]") {
  std::mt19937 rng(35);
  const int64_t B = 2, T = 5, H = 3, D = 8;
  const ops::RopeTables tables = ops::rope_tables(16, D, 10000.0);
  CHECK(tables.cos.shape() == Shape{16, D / 2});
  CHECK(ops::to_vector<float>(tables.cos)[size_t(1 * 4 + 1)] ==
        Approx(std::cos(std::pow(1e4, -0.25))));
  for (DType dt : {DType::kF32, DType::kF64}) {
    const Tensor x = random_tensor(rng, {B, T, H, D}, dt, Layout::kStrided);
    const Ref rx(x);
    Ref want({B, T, H, D});
    for (int64_t i = 0; i < rx.numel(); i += 2) {
      const auto idx = unravel(rx.shape, i);
      const double angle = double(idx[1]) * std::pow(10000.0, -double(idx[3]) / D);
      const double x0 = rx.v[size_t(i)], x1 = rx.v[size_t(i + 1)];
      want.v[size_t(i)] = x0 * std::cos(angle) - x1 * std::sin(angle);
      want.v[size_t(i + 1)] = x0 * std::sin(angle) + x1 * std::cos(angle);
    }
    const Tensor y = ops::rope(x, tables);
    check_close(y, want, 1e-5, 1e-6, str_cat("rope ", dtype_name(dt)));
    check_close(ops::rope(y, tables, true), rx, 1e-5, 1e-6, "rope inverse");
  }
  CHECK_THROWS_WITH(ops::rope(ops::zeros({1, 20, 1, D}), tables), Catch::Contains("do not cover"));
}

TEST_CASE("the backend's rope reads a strided x as its contiguous copy", "[nn][rope][strided]") {
  // ops::rope makes x contiguous first; the backend is also called on views
  // (the GPU op table's (B, T, H, D) view of (B, H, T, D) memory), and the
  // CPU kernel must follow x's strides as the CUDA one does.
  std::mt19937 rng(36);
  const int64_t B = 2, T = 7, H = 3, D = 16;
  const ops::RopeTables tables = ops::rope_tables(T, D, 10000.0);
  for (DType dt : {DType::kF32, DType::kF64}) {
    const Tensor memory = random_tensor(rng, {B, H, T, D}, dt, Layout::kContiguous);
    const Tensor x = ops::transpose(memory, 1, 2);  // (B, T, H, D), strides (336, 16, 112, 1)
    REQUIRE_FALSE(x.is_contiguous());
    const Tensor c = ops::contiguous(ops::to(tables.cos, dt)),
                 s = ops::contiguous(ops::to(tables.sin, dt));
    for (bool inverse : {false, true}) {
      Tensor strided = ops::empty({B, T, H, D}, {dt}), dense = ops::empty({B, T, H, D}, {dt});
      backend_for(Device::cpu()).rope(x, c, s, strided, inverse);
      backend_for(Device::cpu()).rope(ops::contiguous(x), c, s, dense, inverse);
      CHECK(ops::to_vector<double>(strided) == ops::to_vector<double>(dense));
    }
  }
}

TEST_CASE("embedding gathers rows and its backward sums repeated ids", "[nn][embedding]") {
  const Tensor w = ops::reshape(ops::arange(0, 12, 1, {DType::kF32}), {4, 3});
  const Tensor ids = ops::from_vector<int64_t>({3, 0, 3, 1}, {2, 2});
  const Tensor e = ops::embedding(w, ids);
  CHECK(e.shape() == Shape{2, 2, 3});
  CHECK(ops::to_vector<float>(e) == std::vector<float>{9, 10, 11, 0, 1, 2, 9, 10, 11, 3, 4, 5});
  const Tensor dw = ops::embedding_backward(ops::ones({2, 2, 3}), ids, 4);
  CHECK(ops::to_vector<float>(dw) == std::vector<float>{1, 1, 1, 1, 1, 1, 0, 0, 0, 2, 2, 2});
  CHECK_THROWS_WITH(ops::embedding(w, ops::from_vector<int64_t>({4}, {1})),
                    Catch::Contains("index_select: index 4 is out of range for a dim of size 4"));
}

TEST_CASE("adamw_step_ follows torch.optim.AdamW", "[nn][optim]") {
  std::mt19937 rng(36);
  Tensor p = random_tensor(rng, {100001}, DType::kF32, Layout::kContiguous);
  Tensor m = ops::zeros({100001}), v = ops::zeros({100001});
  Vec rp = Ref(p).v, rm(rp.size(), 0), rv(rp.size(), 0);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  for (int64_t step = 1; step <= 3; ++step) {
    const Tensor g = random_tensor(rng, {100001}, DType::kF32, Layout::kContiguous);
    const Vec rg = Ref(g).v;
    ops::adamw_step_(p, g, m, v, {lr, b1, b2, eps, wd, step});
    for (size_t i = 0; i < rp.size(); ++i) {  // PyTorch's update, in f64
      rp[i] *= 1 - lr * wd;
      rm[i] = b1 * rm[i] + (1 - b1) * rg[i];
      rv[i] = b2 * rv[i] + (1 - b2) * rg[i] * rg[i];
      const double denom = std::sqrt(rv[i]) / std::sqrt(1 - std::pow(b2, step)) + eps;
      rp[i] -= lr / (1 - std::pow(b1, step)) * rm[i] / denom;
    }
  }
  check_close(p, as_ref({100001}, rp), 1e-5, 1e-6, "param after 3 steps");
  check_close(v, as_ref({100001}, rv), 1e-5, 1e-9, "exp_avg_sq after 3 steps");
  CHECK_THROWS_WITH(ops::adamw_step_(p, ops::zeros({3}), m, v, {lr, b1, b2, eps, wd, 1}),
                    Catch::Contains("adamw_step_: expected f32 tensors"));
}
