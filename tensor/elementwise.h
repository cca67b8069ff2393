// Elementwise ops. Binary ops broadcast (numpy rules) and promote dtypes
// (promote_types); comparisons and logical ops return bool. The half types
// (bf16, f16) are computed in f32 and rounded back. `*_` variants write
// into their first argument and return it.
#pragma once

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace spmd::ops {

// --- Binary, tensor with tensor ---------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
// Any BinaryOp (the activation backwards included), with broadcasting.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);

// --- Binary with a scalar: t op s, and s op t where order matters --------------
Tensor add(const Tensor& t, double s);
Tensor sub(const Tensor& t, double s);
Tensor sub(double s, const Tensor& t);
Tensor mul(const Tensor& t, double s);
Tensor div(const Tensor& t, double s);
Tensor div(double s, const Tensor& t);
Tensor pow(const Tensor& t, double exponent);
Tensor maximum(const Tensor& t, double s);
Tensor minimum(const Tensor& t, double s);
Tensor eq(const Tensor& t, double s);
Tensor ne(const Tensor& t, double s);
Tensor lt(const Tensor& t, double s);
Tensor le(const Tensor& t, double s);
Tensor gt(const Tensor& t, double s);
Tensor ge(const Tensor& t, double s);
Tensor clamp(const Tensor& t, double low, double high);

// --- In place (the optimizers' and the communicators' arithmetic) -----------
// REQUIRES: the other operand broadcasts to t's shape; t keeps its dtype.
Tensor& add_(Tensor& t, const Tensor& other, double alpha = 1);  // t += alpha * other
Tensor& sub_(Tensor& t, const Tensor& other);
Tensor& mul_(Tensor& t, const Tensor& other);
Tensor& div_(Tensor& t, const Tensor& other);
Tensor& maximum_(Tensor& t, const Tensor& other);
Tensor& minimum_(Tensor& t, const Tensor& other);
Tensor& add_(Tensor& t, double s);
Tensor& mul_(Tensor& t, double s);
Tensor& div_(Tensor& t, double s);
Tensor& fill_(Tensor& t, double value);
Tensor& zero_(Tensor& t);

// --- Unary ------------------------------------------------------------------
Tensor neg(const Tensor& t);
Tensor abs(const Tensor& t);
Tensor exp(const Tensor& t);
Tensor log(const Tensor& t);
Tensor sqrt(const Tensor& t);
Tensor rsqrt(const Tensor& t);
Tensor tanh(const Tensor& t);
Tensor sigmoid(const Tensor& t);
Tensor relu(const Tensor& t);
// approximate = true: the tanh form (GPT-2's); false: the exact erf form.
Tensor gelu(const Tensor& t, bool approximate = true);
Tensor silu(const Tensor& t);
Tensor sin(const Tensor& t);
Tensor cos(const Tensor& t);
Tensor square(const Tensor& t);
Tensor reciprocal(const Tensor& t);
Tensor sign(const Tensor& t);
Tensor logical_not(const Tensor& t);
Tensor unary(UnaryOp op, const Tensor& t);
Tensor& unary_(UnaryOp op, Tensor& t);

// --- Selection --------------------------------------------------------------
// cond ? a : b, broadcasting all three.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// t with `value` wherever mask (bool, broadcast to t) is true.
Tensor masked_fill(const Tensor& t, const Tensor& mask, double value);
// The lower (upper) triangle of the last two dims, relative to `diagonal`.
Tensor tril(const Tensor& t, int64_t diagonal = 0);
Tensor triu(const Tensor& t, int64_t diagonal = 0);

// True when the two have the same shape and every |a - b| <= atol + rtol |b|.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

}  // namespace spmd::ops
