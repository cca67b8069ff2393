// Attention: the raw ops of tensor/attention.h, and the default
// implementation of Backend::attention and attention_backward, composed of
// the interface's other methods so that every backend has it.
//
// The composition is the textbook one. With grouped-query attention the g = H
// / Hkv query heads that share a key head are stacked into one matrix of g*T
// rows, so one batched product per key head does all of them (and the
// backward's sums over those heads fall out of the products):
//
//   scores = scale q k^T            (B, Hkv, g*T, S), causal: -inf where j > i
//   logp   = log_softmax(scores);  lse = scores[.., 0] - logp[.., 0]
//   out    = exp(logp) v
//   backward: p = softmax(scores); dv = p^T dout; dp = dout v^T;
//             ds = p (dp - rowsum(dp p)); dq = scale ds k; dk = scale ds^T q
//
// It holds every head's (T, S) scores at once, in f32 (f64 for f64 inputs):
// fine as a reference and for CPU-sized problems; the CUDA backend overrides
// both methods with a fused kernel that holds only tiles.
#include "tensor/attention.h"

#include <cmath>
#include <limits>

#include "tensor/backend.h"
#include "tensor/backend_tensor.h"

namespace spmd {
namespace {

Tensor view_as(const Tensor& t, const Shape& shape) {
  return Tensor(t.storage(), shape, contiguous_strides(shape), t.offset(), t.dtype());
}

// The last two dims swapped (no copy).
Tensor transpose_last(const Tensor& t) {
  Shape shape = t.shape(), strides = t.strides();
  const int n = t.ndim();
  std::swap(shape[n - 1], shape[n - 2]);
  std::swap(strides[n - 1], strides[n - 2]);
  return Tensor(t.storage(), shape, strides, t.offset(), t.dtype());
}

// t[..., 0]: the last dim dropped at index 0.
Tensor first_column(const Tensor& t) {
  Shape shape = t.shape(), strides = t.strides();
  shape.erase(t.ndim() - 1);
  strides.erase(t.ndim() - 1);
  return Tensor(t.storage(), shape, strides, t.offset(), t.dtype());
}

// t as a contiguous tensor of dtype `work` (t itself when it already is one).
Tensor as_work(Backend& be, const Tensor& t, DType work) {
  if (t.dtype() == work && t.is_contiguous()) return t;
  Tensor c = empty_on(be, t.device(), t.shape(), work);
  be.copy(t, c);
  return c;
}

struct Dims {
  int64_t B, H, T, D, Hkv, S, g;
};
Dims dims_of(const Tensor& q, const Tensor& k) {
  return {q.size(0), q.size(1), q.size(2), q.size(3), k.size(1), k.size(2), q.size(1) / k.size(1)};
}

// scores (B, Hkv, g*T, S) = scale q k^T, with -inf where key j > query i when causal.
Tensor masked_scores(Backend& be, const Dims& n, const Tensor& qw, const Tensor& kw, bool causal,
                     double scale) {
  const Device dev = qw.device();
  Tensor scores = empty_on(be, dev, {n.B, n.Hkv, n.g * n.T, n.S}, qw.dtype());
  be.matmul(view_as(qw, {n.B, n.Hkv, n.g * n.T, n.D}), transpose_last(kw), scores, scale, 0);
  if (!causal) return scores;
  // mask[i][j] = j > i, from two ranges compared with broadcasting.
  Tensor rows = empty_on(be, dev, {n.T, 1}, DType::kI64);
  Tensor cols = empty_on(be, dev, {1, n.S}, DType::kI64);
  be.arange(rows, 0, 1);
  be.arange(cols, 0, 1);
  Tensor mask = empty_on(be, dev, {n.T, n.S}, DType::kBool);
  be.binary(BinaryOp::kGt, Tensor(cols.storage(), {n.T, n.S}, {0, 1}, 0, DType::kI64),
            Tensor(rows.storage(), {n.T, n.S}, {1, 0}, 0, DType::kI64), mask);
  const Shape five{n.B, n.Hkv, n.g, n.T, n.S};
  Tensor scores5 = view_as(scores, five);
  be.masked_fill(scores5, Tensor(mask.storage(), five, {0, 0, 0, n.S, 1}, 0, DType::kBool),
                 -std::numeric_limits<double>::infinity(), scores5);
  return scores;
}

void check_attention_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  SPMD_CHECK(q.defined() && k.defined() && v.defined(), op, ": undefined input");
  SPMD_CHECK(q.ndim() == 4 && k.ndim() == 4 && v.ndim() == 4, op,
             ": expected q (B, H, T, D), k and v (B, Hkv, S, D), got ", q.shape(), ", ", k.shape(),
             ", ", v.shape());
  SPMD_CHECK(k.shape() == v.shape() && q.size(0) == k.size(0) && q.size(3) == k.size(3) &&
                 k.size(1) > 0 && q.size(1) % k.size(1) == 0,
             op, ": shapes q ", q.shape(), ", k ", k.shape(), ", v ", v.shape(),
             " do not fit (k and v alike, same B and D, H a multiple of Hkv)");
  SPMD_CHECK(is_floating(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
             ": expected q, k, v of one floating dtype, got ", q.dtype(), ", ", k.dtype(), ", ",
             v.dtype());
}

// A (B, H, T, D) tensor for an output or a gradient of attention. On the
// CPU it is the (B, H, T, D) view of a contiguous (B, T, H, D) tensor, the
// layout the model splits its heads from and merges them back into: the
// merge of the heads (transpose(1, 2), then (B, T, H*D)) and the backward's
// way back into the projections then need no copy. Other backends get a
// contiguous (B, H, T, D) tensor.
Tensor heads_tensor(Backend& be, const Tensor& like) {
  if (!like.device().is_cpu()) return empty_on(be, like.device(), like.shape(), like.dtype());
  const Tensor t = empty_on(
      be, like.device(), {like.size(0), like.size(2), like.size(1), like.size(3)}, like.dtype());
  Shape shape = t.shape(), strides = t.strides();  // dims 1 and 2 swapped back (no copy)
  std::swap(shape[1], shape[2]);
  std::swap(strides[1], strides[2]);
  return Tensor(t.storage(), shape, strides, t.offset(), t.dtype());
}

double default_scale(const Tensor& q, double scale) {
  return scale < 0 ? 1.0 / std::sqrt(double(q.size(3))) : scale;
}

}  // namespace

// --- The default implementation of Backend's attention pair -----------------------

void Backend::attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                        double scale, const Tensor& out, const Tensor& lse) {
  const Dims n = dims_of(q, k);
  if (n.B * n.H * n.T == 0 || n.S == 0) return;
  const DType work = q.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  const Tensor qw = as_work(*this, q, work), kw = as_work(*this, k, work);
  const Tensor vw = as_work(*this, v, work);
  Tensor scores = masked_scores(*this, n, qw, kw, causal, scale);
  Tensor logp = empty_on(*this, q.device(), scores.shape(), work);
  softmax(scores, logp, /*log=*/true);
  // Key 0 is visible to every query, so lse = scores[.., 0] - logp[.., 0].
  Tensor lse_w = empty_on(*this, q.device(), {n.B, n.Hkv, n.g * n.T}, work);
  binary(BinaryOp::kSub, first_column(scores), first_column(logp), lse_w);
  copy(view_as(lse_w, {n.B, n.H, n.T}), lse);
  unary(UnaryOp::kExp, logp, logp);  // now p
  Tensor ow = empty_on(*this, q.device(), {n.B, n.Hkv, n.g * n.T, n.D}, work);
  matmul(logp, vw, ow, 1, 0);
  copy(view_as(ow, {n.B, n.H, n.T, n.D}), out);
}

void Backend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const Tensor& out, const Tensor& lse, bool causal,
                                 double scale, const Tensor& dq, const Tensor& dk,
                                 const Tensor& dv) {
  const Dims n = dims_of(q, k);
  if (n.B * n.H * n.T == 0 || n.S == 0) return;
  const DType work = q.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  const Device dev = q.device();
  const Tensor qw = as_work(*this, q, work), kw = as_work(*this, k, work);
  const Tensor vw = as_work(*this, v, work), dow = as_work(*this, dout, work);
  const Shape stacked{n.B, n.Hkv, n.g * n.T, n.D};
  Tensor scores = masked_scores(*this, n, qw, kw, causal, scale);
  Tensor p = empty_on(*this, dev, scores.shape(), work);
  softmax(scores, p, /*log=*/false);

  Tensor dvw = empty_on(*this, dev, {n.B, n.Hkv, n.S, n.D}, work);
  matmul(transpose_last(p), view_as(dow, stacked), dvw, 1, 0);  // sums the g heads
  copy(dvw, dv);
  Tensor dp = empty_on(*this, dev, scores.shape(), work);
  matmul(view_as(dow, stacked), transpose_last(vw), dp, 1, 0);
  Tensor& ds = scores;  // the scores are no longer needed
  softmax_backward(dp, p, ds, /*log=*/false);
  Tensor dqw = empty_on(*this, dev, stacked, work);
  matmul(ds, kw, dqw, scale, 0);
  copy(view_as(dqw, {n.B, n.H, n.T, n.D}), dq);
  Tensor dkw = empty_on(*this, dev, {n.B, n.Hkv, n.S, n.D}, work);
  matmul(transpose_last(ds), view_as(qw, stacked), dkw, scale, 0);
  copy(dkw, dk);
}

// --- The raw ops ------------------------------------------------------------------------

namespace ops {

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                          double scale) {
  check_attention_inputs(q, k, v, "attention");
  Backend& be = backend_for({&q, &k, &v}, "attention");
  AttentionResult r;
  r.out = heads_tensor(be, q);
  r.lse = empty_on(be, q.device(), {q.size(0), q.size(1), q.size(2)}, DType::kF32);
  be.attention(q, k, v, causal, default_scale(q, scale), r.out, r.lse);
  return r;
}

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const AttentionResult& saved, bool causal,
                                  double scale) {
  check_attention_inputs(q, k, v, "attention_backward");
  SPMD_CHECK(dout.defined() && dout.shape() == q.shape() && dout.dtype() == q.dtype(),
             "attention_backward: dout must have q's shape ", q.shape(), " and dtype ", q.dtype());
  SPMD_CHECK(saved.out.defined() && saved.lse.defined() && saved.lse.dtype() == DType::kF32 &&
                 saved.lse.is_contiguous(),
             "attention_backward: expected the forward's out and its contiguous f32 lse");
  Backend& be = backend_for({&dout, &q, &k, &v, &saved.out, &saved.lse}, "attention_backward");
  AttentionGrads g;
  g.dq = heads_tensor(be, q);
  g.dk = heads_tensor(be, k);
  g.dv = heads_tensor(be, v);
  be.attention_backward(dout, q, k, v, saved.out, saved.lse, causal, default_scale(q, scale), g.dq,
                        g.dk, g.dv);
  return g;
}

}  // namespace ops
}  // namespace spmd
