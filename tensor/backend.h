// The device interface. Every op in spmd::ops does its checking, shape
// arithmetic, broadcasting and output allocation once, device-independently,
// then hands the loop to the Backend of the tensors' device: the CPU backend
// (tensor/cpu/, Eigen and OpenMP) or the CUDA backend (tensor/cuda/, which
// launches the kernels of kernels/). Adding a device means implementing this
// class; testing one means running the same op table on it and on the CPU.
//
// Conventions for every method: outputs are allocated by the caller with the
// right shape, dtype and device; inputs already have the output's shape
// (broadcast operands arrive as expanded views with stride 0); any tensor may
// be strided unless a method says "contiguous". An output may be the very
// same tensor as an input (in-place ops), never a partial overlap.
//
// Dtypes: the front end promotes operands to one dtype before the call, so a
// method sees one dtype across its value tensors unless it says otherwise
// (conditions and masks are bool; indices and targets i64). The half types
// (bf16, f16) are computed in f32 and rounded once on the way out. Index
// values are checked by the backend: an index out of range throws
// InvalidArgument naming the op (the CPU backend checks before it writes).
#pragma once

#include <cstdint>

#include "tensor/storage.h"
#include "tensor/tensor.h"

namespace spmd {

enum class UnaryOp : uint8_t {
  kNeg, kAbs, kExp, kLog, kSqrt, kRsqrt, kTanh, kSigmoid, kRelu,
  kGeluTanh,  // x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's GELU
  kGeluErf,   // x/2 (1 + erf(x / sqrt 2)), the exact GELU
  kSilu,      // x sigmoid(x)
  kSin, kCos, kSquare, kReciprocal, kSign, kLogicalNot,
};

enum class BinaryOp : uint8_t {
  kAdd, kSub, kMul, kDiv, kPow, kMaximum, kMinimum,
  kEq, kNe, kLt, kLe, kGt, kGe,        // produce bool
  kLogicalAnd, kLogicalOr,             // produce bool
  // Backward of the activations: a = dy, b = the forward input x (or output y).
  kReluBackward,      // dy * (x > 0)
  kGeluTanhBackward,  // dy * gelu_tanh'(x)
  kGeluErfBackward,   // dy * gelu_erf'(x)
  kSiluBackward,      // dy * silu'(x)
  kSigmoidBackward,   // dy * y (1 - y), b = y
  kTanhBackward,      // dy * (1 - y^2), b = y
};

// True for the comparisons and logical ops, whose output is bool.
constexpr bool produces_bool(BinaryOp op) {
  return op >= BinaryOp::kEq && op <= BinaryOp::kLogicalOr;
}
// The op's name in error messages: "add", "gelu_tanh_backward"...
const char* op_name(UnaryOp op);
const char* op_name(BinaryOp op);

enum class Reduction : uint8_t { kSum, kMean, kMax, kMin, kProd };

// Hyper-parameters of one fused AdamW step (PyTorch's torch.optim.AdamW).
struct AdamWStep {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;  // 1 for the first step (bias correction)
};

class Backend {
 public:
  virtual ~Backend() = default;

  // --- Memory --------------------------------------------------------------
  virtual DataPtr allocate(size_t nbytes, Device device) = 0;
  // dst[i] = convert(src[i]) for every index; same shape, any two dtypes
  // (floating to integer truncates toward zero, as a C++ cast; anything to
  // bool is `!= 0`). The two may be on
  // different devices when one of them is on this backend's and the other on
  // the CPU (the CUDA backend does host<->device copies).
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  // Blocks until the work queued on `device` has finished.
  virtual void synchronize(Device device) {}

  // --- Elementwise ---------------------------------------------------------
  virtual void fill(const Tensor& out, double value) = 0;
  // out[i] = start + i * step. REQUIRES: out contiguous.
  virtual void arange(const Tensor& out, double start, double step) = 0;
  virtual void unary(UnaryOp op, const Tensor& x, const Tensor& out) = 0;
  // a and b share one dtype; out has it too, except for comparisons and
  // logical ops (kEq..kLogicalOr), whose out is bool. The activation
  // backwards are defined for floating dtypes only.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out = a op s (or s op a when scalar_first), s converted to the compute
  // type (f32 for half types); dtypes as for binary.
  virtual void binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out,
                             bool scalar_first) = 0;
  // out = cond ? a : b. cond is bool; a, b and out share one dtype.
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out = mask ? value : x. mask is bool; x and out share one dtype.
  virtual void masked_fill(const Tensor& x, const Tensor& mask, double value,
                           const Tensor& out) = 0;
  // Keeps the lower (upper) triangle of the last two dims: element [.., i, j]
  // survives when j - i <= diagonal (>= diagonal for upper), else becomes 0.
  virtual void triangle(const Tensor& x, int64_t diagonal, bool upper, const Tensor& out) = 0;

  // --- Reductions ----------------------------------------------------------
  // `out` has x's ndim, with size 1 on each reduced dim (keepdim form); a dim
  // of x with size 1 is not reduced over (it has nothing to reduce).
  // Dtypes: out is i64 for kSum and kProd of integer or bool x, x's dtype
  // otherwise; kMean takes floating x only. Half types accumulate in f32,
  // f32 in f32 (several partial sums), f64 in f64, integers in i64. A
  // reduction over zero elements gives the identity (0 for sum, 1 for
  // prod, NaN for mean); kMax and kMin over zero elements are rejected by
  // the front end.
  virtual void reduce(Reduction op, const Tensor& x, const Tensor& out) = 0;
  // Index (i64) of the largest (smallest) element along `dim`; the first one on ties.
  // `out` has x's ndim, size 1 on `dim`.
  virtual void arg_reduce(bool is_max, const Tensor& x, int dim, const Tensor& out) = 0;

  // --- Matrix products -------------------------------------------------------
  // out[..] = alpha * a[..] @ b[..] + beta * out[..] over the leading (batch)
  // dims, which the three share (a and b may be expanded, stride 0).
  // a: (..., M, K), b: (..., K, N), out: (..., M, N); the last two dims of
  // each have a unit stride on one side (row- or column-major, so transposed
  // operands need no copy). a, b and out share one dtype (f32 or f64; the
  // half types may be computed through f32), except that bf16/f16 operands
  // may write an f32 out (mixed precision). With beta == 0, out is not read.
  virtual void matmul(const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
                      double beta) = 0;

  // --- Neural-network ops, along the last dim of contiguous inputs ----------
  // Every tensor below is contiguous. The saved statistics (mean, rstd, lse)
  // are f32, or f64 when the input is f64 (so f64 gradient checks stay exact).
  // Rows of length 0 are allowed (softmax of nothing is nothing).
  virtual void softmax(const Tensor& x, const Tensor& out, bool log) = 0;
  // dx from dy and the forward output y (of softmax, or of log_softmax when log).
  virtual void softmax_backward(const Tensor& dy, const Tensor& y, const Tensor& dx, bool log) = 0;
  // y = (x - mean) * rstd * weight + bias over the last dim with rstd =
  // 1/sqrt(var + eps), var the biased variance; saves mean and rstd (shape
  // x.shape[:-1]). weight and bias (C) may be undefined.
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                          const Tensor& y, const Tensor& mean, const Tensor& rstd) = 0;
  // dweight and dbias are overwritten (not accumulated); either may be undefined.
  virtual void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                                   const Tensor& dweight, const Tensor& dbias) = 0;
  // y = x * rstd * weight with rstd = 1/sqrt(mean(x^2) + eps).
  virtual void rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                        const Tensor& rstd) = 0;
  virtual void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                 const Tensor& rstd, const Tensor& dx, const Tensor& dweight) = 0;
  // Per row n of logits (N, V): loss[n] = lse[n] - logits[n, target[n]], or 0
  // when target[n] == ignore_index. loss and lse are (N); lse is saved for
  // backward. targets are i64 (N); a target outside [0, V) that is not
  // ignore_index throws.
  virtual void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                             const Tensor& loss, const Tensor& lse) = 0;
  // dlogits[n] = dloss[n] * (softmax(logits[n]) - onehot(target[n])), 0 for
  // ignored rows. dloss is (N), of lse's dtype; dlogits of logits' dtype.
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                      const Tensor& lse, const Tensor& dloss,
                                      int64_t ignore_index, const Tensor& dlogits) = 0;
  // Rotary embedding of x (..., T, H, D) with tables cos, sin (T, D/2): each
  // pair (x[2i], x[2i+1]) is rotated by angle t*theta_i:
  //   out[2i] = x[2i] cos - x[2i+1] sin,  out[2i+1] = x[2i] sin + x[2i+1] cos;
  // `inverse` rotates back (sin negated: the backward pass). The tables
  // have x's compute dtype (f32, or f64 for f64 x).
  virtual void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out,
                    bool inverse) = 0;

  // --- Indexing --------------------------------------------------------------
  // Index tensors are i64 (any strides); values must lie in [0, size of dim).
  // out = x.index_select(dim, index): slices of x at the indices (1-D).
  virtual void index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) = 0;
  // out.index_select(dim, index) += src, with repeated indices accumulating
  // (the backward of index_select and of embedding).
  virtual void index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) = 0;
  // out[i][j] = x[i][index[i][j]] (for dim 1; likewise for any dim).
  virtual void gather(const Tensor& x, int dim, const Tensor& index, const Tensor& out) = 0;
  // out[i][index[i][j]] += src[i][j] (for dim 1; likewise for any dim).
  virtual void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) = 0;

  // --- Random numbers (tensor/random.h says how Philox counters are used) ---
  // REQUIRES: out contiguous. Element i (row-major) uses the counter
  // offset + i/4. For an integer `out`, random_uniform draws integers in
  // [low, high) with the integer mapping of random.h (high - low <= 2^32).
  virtual void random_uniform(const Tensor& out, double low, double high, uint64_t seed,
                              uint64_t offset) = 0;
  virtual void random_normal(const Tensor& out, double mean, double std, uint64_t seed,
                             uint64_t offset) = 0;

  // --- Fused optimizer steps ---------------------------------------------------
  // One AdamW step on contiguous tensors of one shape (param, exp_avg and
  // exp_avg_sq f32; grad f32), as torch.optim.AdamW (decoupled decay):
  //   param *= 1 - lr * weight_decay
  //   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
  //   param -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
  virtual void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                          const Tensor& exp_avg_sq, const AdamWStep& hp) = 0;

  // --- Fused epilogues --------------------------------------------------------
  // y = gelu(u + bias) over the last dim of u (rows, C), bias (C): the first
  // Linear of a GELU MLP, computed without its bias, and its activation in
  // one pass over u (the tanh GELU when approximate, else the erf one). u,
  // bias and y are contiguous, of one floating dtype. The default composes
  // binary(kAdd) and unary(kGelu*), so it serves every backend and is the
  // reference the CPU backend's fused kernel is tested against.
  virtual void bias_gelu(const Tensor& u, const Tensor& bias, bool approximate, const Tensor& y);
  // du = dy * gelu'(u + bias), and dbias (C) = du summed over the rows
  // (overwritten), in one pass; dy and du contiguous, of u's shape.
  virtual void bias_gelu_backward(const Tensor& dy, const Tensor& u, const Tensor& bias,
                                  bool approximate, const Tensor& du, const Tensor& dbias);

  // --- Attention -------------------------------------------------------------
  // Scaled dot-product attention of q (B, H, T, D) over k and v (B, Hkv, S, D),
  // H a multiple of Hkv (grouped-query attention: query head h reads key head
  // h / (H / Hkv)): out (B, H, T, D) = softmax(scale q k^T + mask) v, where the
  // causal mask hides key j from query i when j > i (top-left aligned, as
  // PyTorch's is_causal). Saves lse (B, H, T), contiguous f32: the log of each
  // row's softmax denominator, log sum_j exp(scale q_i . k_j) over the visible
  // keys, which is all the backward needs besides the inputs. Any strides.
  //
  // The default implementation (tensor/attention.cpp) composes the other
  // methods of this interface: it materializes each head's (T, S) scores in
  // f32 (f64 for f64 inputs), so it serves every backend and is the reference
  // the CUDA backend's fused kernel, which holds only tiles, is tested against.
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                         double scale, const Tensor& out, const Tensor& lse);
  // dq, dk, dv (the shapes of q, k, v) are overwritten, from dout and the
  // forward's inputs, out and lse.
  virtual void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  bool causal, double scale, const Tensor& dq, const Tensor& dk,
                                  const Tensor& dv);
};

// The backend of a device. Throws when spmd was built without CUDA and a
// CUDA device is asked for.
Backend& backend_for(Device device);
// The backend that runs `op` over these tensors (undefined ones are skipped).
// REQUIRES: all of them live on one device; otherwise throws, naming the op
// and the devices.
Backend& backend_for(std::initializer_list<const Tensor*> tensors, const char* op);

}  // namespace spmd
