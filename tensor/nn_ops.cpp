// The fused transformer ops: checks and shapes, then one Backend call. The
// backend works along the last dim of contiguous tensors, so an op along
// another dim moves that dim last (a transpose and a copy) and back.
#include "tensor/nn_ops.h"

#include <cmath>

#include "tensor/backend.h"
#include "tensor/copy.h"
#include "tensor/elementwise.h"
#include "tensor/factory.h"
#include "tensor/indexing.h"
#include "tensor/reduce.h"
#include "tensor/views.h"

namespace spmd::ops {
namespace {

// The dtype of saved statistics (mean, rstd, lse): f64 for f64, else f32.
DType stat_dtype(DType dt) { return dt == DType::kF64 ? DType::kF64 : DType::kF32; }

void check_floating(const Tensor& t, const char* op) {
  SPMD_CHECK(is_floating(t.dtype()), op, ": expected a floating-point tensor, got ",
             dtype_name(t.dtype()), " ", t.shape());
}

// A (C) parameter of a norm over x's last dim, checked; undefined stays undefined.
Tensor norm_param(const Tensor& p, const Tensor& x, const char* op, const char* what) {
  if (!p.defined()) return p;
  SPMD_CHECK(p.ndim() == 1 && p.size(0) == x.size(-1), op, ": ", what, " of shape ", p.shape(),
             " does not match the last dim of x ", x.shape());
  SPMD_CHECK(p.device() == x.device(), op, ": ", what, " is on ", p.device(), ", x on ",
             x.device());
  return contiguous(to(p, x.dtype()));
}

// x.shape[:-1]: the shape of per-row statistics.
Shape row_shape(const Tensor& x) {
  Shape s = x.shape();
  s.erase(s.ndim() - 1);
  return s;
}

// Runs f on x with `dim` moved last (contiguous), and moves the result's dim back.
template <class F>
Tensor along_last(const Tensor& x, int dim, const char* op, F&& f) {
  check_floating(x, op);
  const int d = wrap_dim(dim, std::max(x.ndim(), 1), op);
  if (x.ndim() == 0) return view(f(view(x, {1})), Shape{});
  if (d == x.ndim() - 1) return f(contiguous(x));
  return contiguous(transpose(f(contiguous(transpose(x, d, -1))), d, -1));
}

}  // namespace

Tensor softmax(const Tensor& x, int dim) {
  return along_last(x, dim, "softmax", [](const Tensor& t) {
    Tensor out = empty_like(t);
    backend_for(t.device()).softmax(t, out, false);
    return out;
  });
}

Tensor log_softmax(const Tensor& x, int dim) {
  return along_last(x, dim, "log_softmax", [](const Tensor& t) {
    Tensor out = empty_like(t);
    backend_for(t.device()).softmax(t, out, true);
    return out;
  });
}

Tensor softmax_backward(const Tensor& dy, const Tensor& y, int dim, bool log) {
  SPMD_CHECK(dy.shape() == y.shape() && dy.dtype() == y.dtype(), "softmax_backward: dy ",
             dtype_name(dy.dtype()), " ", dy.shape(), " does not match y ", dtype_name(y.dtype()),
             " ", y.shape());
  const int d = wrap_dim(dim, std::max(y.ndim(), 1), "softmax_backward");
  const Tensor yl = y.ndim() ? contiguous(transpose(y, d, -1)) : view(y, {1});
  return along_last(dy, dim, "softmax_backward", [&](const Tensor& g) {
    Tensor dx = empty_like(g);
    backend_for({&g, &yl}, "softmax_backward").softmax_backward(g, yl, dx, log);
    return dx;
  });
}

// --- Norms ---------------------------------------------------------------------

NormResult layer_norm(const Tensor& x_in, const Tensor& weight, const Tensor& bias, double eps) {
  check_floating(x_in, "layer_norm");
  SPMD_CHECK(x_in.ndim() >= 1, "layer_norm: expected at least 1 dim, got a 0-d tensor");
  const Tensor x = contiguous(x_in);
  const Tensor w = norm_param(weight, x, "layer_norm", "weight");
  const Tensor b = norm_param(bias, x, "layer_norm", "bias");
  NormResult r{empty_like(x), empty(row_shape(x), {stat_dtype(x.dtype()), x.device()}),
               empty(row_shape(x), {stat_dtype(x.dtype()), x.device()})};
  backend_for(x.device()).layer_norm(x, w, b, eps, r.y, r.mean, r.rstd);
  return r;
}

NormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                              const NormResult& saved, bool has_bias) {
  check_floating(x, "layer_norm_backward");
  SPMD_CHECK(dy.shape() == x.shape(), "layer_norm_backward: dy ", dy.shape(), " vs x ", x.shape());
  const Tensor xc = contiguous(x), g = contiguous(to(dy, x.dtype()));
  const Tensor w = norm_param(weight, xc, "layer_norm_backward", "weight");
  NormGrads grads{empty_like(xc), Tensor(), Tensor()};
  const TensorOptions param_opts{x.dtype(), x.device()};
  if (w.defined()) grads.dweight = empty({x.size(-1)}, param_opts);
  if (has_bias) grads.dbias = empty({x.size(-1)}, param_opts);
  backend_for(x.device())
      .layer_norm_backward(g, xc, w, saved.mean, saved.rstd, grads.dx, grads.dweight, grads.dbias);
  return grads;
}

NormResult rms_norm(const Tensor& x_in, const Tensor& weight, double eps) {
  check_floating(x_in, "rms_norm");
  SPMD_CHECK(x_in.ndim() >= 1, "rms_norm: expected at least 1 dim, got a 0-d tensor");
  const Tensor x = contiguous(x_in);
  const Tensor w = norm_param(weight, x, "rms_norm", "weight");
  NormResult r{empty_like(x), Tensor(), empty(row_shape(x), {stat_dtype(x.dtype()), x.device()})};
  backend_for(x.device()).rms_norm(x, w, eps, r.y, r.rstd);
  return r;
}

NormGrads rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                            const NormResult& saved) {
  check_floating(x, "rms_norm_backward");
  SPMD_CHECK(dy.shape() == x.shape(), "rms_norm_backward: dy ", dy.shape(), " vs x ", x.shape());
  const Tensor xc = contiguous(x), g = contiguous(to(dy, x.dtype()));
  const Tensor w = norm_param(weight, xc, "rms_norm_backward", "weight");
  NormGrads grads{empty_like(xc), Tensor(), Tensor()};
  if (w.defined()) grads.dweight = empty({x.size(-1)}, {x.dtype(), x.device()});
  backend_for(x.device()).rms_norm_backward(g, xc, w, saved.rstd, grads.dx, grads.dweight);
  return grads;
}

// --- Embedding -------------------------------------------------------------------

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  SPMD_CHECK(weight.ndim() == 2, "embedding: weight must be (V, C), got ", weight.shape());
  Shape shape = ids.shape();
  shape.push_back(weight.size(1));
  return view(index_select(weight, 0, reshape(ids, {-1})), shape);
}

Tensor embedding_backward(const Tensor& dout, const Tensor& ids, int64_t num_embeddings) {
  SPMD_CHECK(dout.ndim() == ids.ndim() + 1, "embedding_backward: dout ", dout.shape(),
             " should be ids ", ids.shape(), " plus one dim");
  const int64_t C = dout.size(-1);
  Tensor dweight = zeros({num_embeddings, C}, {dout.dtype(), dout.device()});
  index_add_(dweight, 0, reshape(ids, {-1}), reshape(dout, {-1, C}));
  return dweight;
}

// --- Cross-entropy -------------------------------------------------------------

namespace {
void check_cross_entropy(const Tensor& logits, const Tensor& targets) {
  check_floating(logits, "cross_entropy");
  SPMD_CHECK(logits.ndim() == 2 && targets.ndim() == 1 && targets.size(0) == logits.size(0),
             "cross_entropy: expected logits (N, V) and targets (N), got ", logits.shape(), " and ",
             targets.shape());
  SPMD_CHECK(!is_floating(targets.dtype()) && targets.dtype() != DType::kBool,
             "cross_entropy: targets must be integers, got ", dtype_name(targets.dtype()));
  SPMD_CHECK(logits.device() == targets.device(), "cross_entropy: logits on ", logits.device(),
             ", targets on ", targets.device());
}
}  // namespace

CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                 std::optional<DType> loss_dtype) {
  check_cross_entropy(logits, targets);
  const Tensor x = contiguous(logits), t = contiguous(to(targets, DType::kI64));
  const TensorOptions stat{stat_dtype(x.dtype()), x.device()};
  const Tensor rows = empty({x.size(0)}, stat);
  CrossEntropyResult r;
  r.lse = empty({x.size(0)}, stat);
  backend_for(x.device()).cross_entropy(x, t, ignore_index, rows, r.lse);
  r.count = to(sum(ne(t, double(ignore_index))), DType::kI64);
  // 0 rows counted: 0/0 = NaN, as PyTorch.
  r.loss = to(div(sum(rows), to(r.count, stat.dtype)), loss_dtype.value_or(x.dtype()));
  return r;
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                              const CrossEntropyResult& saved, const Tensor& dloss,
                              int64_t ignore_index) {
  check_cross_entropy(logits, targets);
  SPMD_CHECK(dloss.numel() == 1 && saved.count.defined(), "cross_entropy_backward: expected a ",
             "one-element dloss and the forward's result, got dloss ", dloss.shape());
  const Tensor x = contiguous(logits), t = contiguous(to(targets, DType::kI64));
  const TensorOptions stat{stat_dtype(x.dtype()), x.device()};
  // d(mean loss)/d(row loss) is 1/count for every row that counts (ignored
  // rows get 0 from the backend, whatever this holds).
  const Tensor per_row = div(to(to(reshape(dloss, Shape{}), x.device()), stat.dtype),
                             to(to(saved.count, x.device()), stat.dtype));  // 0-d
  const Tensor drows = contiguous(expand(reshape(per_row, {1}), {x.size(0)}));
  Tensor dlogits = empty_like(x);
  backend_for(x.device()).cross_entropy_backward(x, t, saved.lse, drows, ignore_index, dlogits);
  return dlogits;
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                              const CrossEntropyResult& saved, double dloss, int64_t ignore_index) {
  return cross_entropy_backward(logits, targets, saved,
                                full(Shape{}, dloss, {stat_dtype(logits.dtype()), logits.device()}),
                                ignore_index);
}

// --- Rotary embeddings -------------------------------------------------------------

RopeTables rope_tables(int64_t T, int64_t head_dim, double theta, Device device) {
  SPMD_CHECK(T >= 0 && head_dim > 0 && head_dim % 2 == 0, "rope_tables: expected T >= 0 and an ",
             "even head_dim, got T ", T, ", head_dim ", head_dim);
  const int64_t half = head_dim / 2;
  std::vector<float> c(size_t(T * half)), s(size_t(T * half));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(t) * std::pow(theta, -2.0 * double(i) / double(head_dim));
      c[size_t(t * half + i)] = float(std::cos(angle));
      s[size_t(t * half + i)] = float(std::sin(angle));
    }
  }
  return {from_vector(c, {T, half}, device), from_vector(s, {T, half}, device)};
}

Tensor rope(const Tensor& x_in, const RopeTables& tables, bool inverse) {
  check_floating(x_in, "rope");
  SPMD_CHECK(x_in.ndim() >= 3 && x_in.size(-1) % 2 == 0, "rope: expected x (..., T, H, D) with ",
             "an even D, got ", x_in.shape());
  const int64_t T = x_in.size(-3), half = x_in.size(-1) / 2;
  SPMD_CHECK(tables.cos.ndim() == 2 && tables.cos.size(0) >= T && tables.cos.size(1) == half &&
                 tables.sin.shape() == tables.cos.shape(),
             "rope: tables of shape ", tables.cos.shape(), " do not cover x ", x_in.shape(),
             " (need at least (", T, ", ", half, "))");
  const DType stat = stat_dtype(x_in.dtype());
  const Tensor x = contiguous(x_in);
  const Tensor c = contiguous(to(narrow(tables.cos, 0, 0, T), stat));
  const Tensor s = contiguous(to(narrow(tables.sin, 0, 0, T), stat));
  Tensor out = empty_like(x);
  backend_for({&x, &c, &s}, "rope").rope(x, c, s, out, inverse);
  return out;
}

// --- Optimizer step -----------------------------------------------------------------

void adamw_step_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                 const AdamWStep& hp) {
  for (const Tensor* t : std::initializer_list<const Tensor*>{&grad, &exp_avg, &exp_avg_sq}) {
    SPMD_CHECK(
        t->shape() == param.shape() && t->dtype() == DType::kF32 && param.dtype() == DType::kF32,
        "adamw_step_: expected f32 tensors of the parameter's shape ", param.shape(), ", got ",
        dtype_name(t->dtype()), " ", t->shape());
  }
  SPMD_CHECK(hp.step >= 1, "adamw_step_: step counts from 1, got ", hp.step);
  SPMD_CHECK(param.is_contiguous() && exp_avg.is_contiguous() && exp_avg_sq.is_contiguous(),
             "adamw_step_: the parameter and its state must be contiguous");
  const Tensor g = contiguous(grad);
  backend_for({&param, &g, &exp_avg, &exp_avg_sq}, "adamw_step_")
      .adamw_step(param, g, exp_avg, exp_avg_sq, hp);
  for (Tensor* t : {&param, &exp_avg, &exp_avg_sq}) t->storage()->bump_version();
}

}  // namespace spmd::ops
