// Matrix products: PyTorch's matmul rules (1-D operands, broadcast batch
// dims), then one Backend::matmul.
//
// Two things keep it as fast as the GEMM underneath. A batch of matrices
// times one matrix, (B, T, C) @ (C, N), is one (B*T, C) @ (C, N) GEMM when
// the batch folds into rows (as in every Linear layer). And operands whose
// last two dims are row- or column-major (a transposed weight, say) go to
// the GEMM as they are; only other layouts are copied. linear() adds its
// bias by writing it into the output first and letting the GEMM accumulate
// on top (beta = 1), which saves a pass over the output.
#include "tensor/linalg.h"

#include "tensor/backend.h"
#include "tensor/copy.h"
#include "tensor/factory.h"
#include "tensor/views.h"

namespace spmd::ops {
namespace {

// True when the last two dims are row- or column-major with a BLAS-valid
// leading dimension (see cpu/matmul.cpp).
bool gemm_ready(const Tensor& t) {
  const int64_t rows = t.size(-2), cols = t.size(-1), sr = t.stride(-2), sc = t.stride(-1);
  const bool row_major = (cols <= 1 || sc == 1) && (rows <= 1 || sr >= std::max<int64_t>(cols, 1));
  const bool col_major = (rows <= 1 || sr == 1) && (cols <= 1 || sc >= std::max<int64_t>(rows, 1));
  return row_major || col_major;
}

// True when a's leading dims and its row dim merge into one dim of rows.
bool folds_into_rows(const Tensor& a) {
  int64_t expected = -1;  // the stride the next outer dim of size > 1 must have
  for (int d = a.ndim() - 2; d >= 0; --d) {
    if (a.size(d) == 1) continue;
    if (expected >= 0 && a.stride(d) != expected) return false;
    expected = a.stride(d) * a.size(d);
  }
  return true;
}

Tensor gemm_operand(const Tensor& t) { return gemm_ready(t) ? t : clone(t); }

void check_matmul(const Tensor& a, const Tensor& b) {
  SPMD_CHECK(a.ndim() >= 1 && b.ndim() >= 1, "matmul: both operands need at least 1 dim, got ",
             a.shape(), " and ", b.shape());
  SPMD_CHECK(a.device() == b.device(), "matmul: expected both operands on one device, got ",
             a.device(), " and ", b.device());
  SPMD_CHECK(a.dtype() == b.dtype() && is_floating(a.dtype()),
             "matmul: expected two floating-point operands of one dtype, got ",
             dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  const int64_t ka = a.size(-1), kb = b.ndim() == 1 ? b.size(0) : b.size(-2);
  SPMD_CHECK(ka == kb, "matmul: shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied (",
             ka, " != ", kb, ")");
}

// The operands as (..., M, K) and (..., K, N) with equal batch dims (expanded),
// and the shape of the product as the caller sees it.
struct Plan {
  Tensor a, b;
  Shape out_shape;   // the backend's (..., M, N)
  Shape user_shape;  // with the 1-D operands' dims dropped
};

Plan plan_matmul(const Tensor& a_in, const Tensor& b_in) {
  check_matmul(a_in, b_in);
  Tensor a = a_in.ndim() == 1 ? unsqueeze(a_in, 0) : a_in;
  Tensor b = b_in.ndim() == 1 ? unsqueeze(b_in, 1) : b_in;
  const int64_t M = a.size(-2), N = b.size(-1), K = a.size(-1);
  // Fold a's batch into its rows when b is a single matrix and a's layout allows.
  if (b.ndim() == 2 && a.ndim() > 2 && a.stride(-1) == 1 && K > 0 && folds_into_rows(a)) {
    Shape user = a.shape();
    user[user.ndim() - 1] = N;
    if (b_in.ndim() == 1) user.erase(user.ndim() - 1);
    const Tensor rows = view(a, {a.numel() / K, K});
    return {rows, b, Shape{rows.size(0), N}, user};
  }
  Shape batch_a(std::span<const int64_t>(a.shape().begin(), a.ndim() - 2));
  Shape batch_b(std::span<const int64_t>(b.shape().begin(), b.ndim() - 2));
  Shape out = broadcast_shapes(batch_a, batch_b, "matmul");
  Shape sa = out, sb = out;
  sa.push_back(M);
  sa.push_back(K);
  sb.push_back(K);
  sb.push_back(N);
  out.push_back(M);
  out.push_back(N);
  Shape user = out;
  if (b_in.ndim() == 1) user.erase(user.ndim() - 1);
  if (a_in.ndim() == 1) user.erase(user.ndim() - (b_in.ndim() == 1 ? 1 : 2));
  return {expand(a, sa), expand(b, sb), out, user};
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  const Plan p = plan_matmul(a, b);
  Tensor out = empty(p.out_shape, {a.dtype(), a.device()});
  backend_for(a.device()).matmul(gemm_operand(p.a), gemm_operand(p.b), out, 1, 0);
  return view(out, p.user_shape);
}

void matmul_out(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
  const Plan p = plan_matmul(a, b);
  const bool widening = out.dtype() == DType::kF32 && is_half_float(a.dtype());
  SPMD_CHECK(out.shape() == p.user_shape && (out.dtype() == a.dtype() || widening) &&
                 out.device() == a.device(),
             "matmul_out: out is ", dtype_name(out.dtype()), " ", out.shape(), " on ", out.device(),
             ", the product is ", dtype_name(a.dtype()), " ", p.user_shape, " on ", a.device());
  const Tensor target = reshape(out, p.out_shape);
  const bool direct = target.storage() == out.storage() && gemm_ready(target);
  const Tensor dst = direct ? target : contiguous(target);  // a copy keeps out's values for beta
  backend_for(a.device()).matmul(gemm_operand(p.a), gemm_operand(p.b), dst, alpha, beta);
  if (!direct) copy_(out, view(dst, out.shape()));
  out.storage()->bump_version();
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  SPMD_CHECK(weight.ndim() == 2, "linear: weight must be (out, in), got ", weight.shape());
  SPMD_CHECK(x.ndim() >= 1 && x.size(-1) == weight.size(1), "linear: input ", x.shape(),
             " does not end in the weight's in_features ", weight.size(1));
  if (!bias.defined()) return matmul(x, transpose(weight, 0, 1));
  SPMD_CHECK(bias.ndim() == 1 && bias.size(0) == weight.size(0), "linear: bias ", bias.shape(),
             " does not match out_features ", weight.size(0));
  Shape shape = x.shape();
  shape[shape.ndim() - 1] = weight.size(0);
  Tensor out = empty(shape, {x.dtype(), x.device()});
  copy_(out, bias);  // broadcast over the rows; the GEMM adds x W^T on top
  matmul_out(out, x, transpose(weight, 0, 1), 1, 1);
  return out;
}

}  // namespace spmd::ops
