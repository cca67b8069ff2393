// The differentiable tensor ops: the same names as the raw ops of tensor/ops.h,
// one namespace up (spmd::exp, not spmd::ops::exp). Each computes its result
// with the raw op and, when grad mode is on and an input requires grad,
// records a node whose backward is written beside it in autograd/ops_*.cpp.
// Broadcasting ops sum their gradients back to each input's shape; views
// hand back gradients of the viewed tensor's shape. Every op here has a row
// in the gradient-check table (tests/autograd/test_gradcheck.cpp).
//
// Not here: in-place differentiable ops (use the raw ops:: ones under
// NoGradGuard, as optimizers do), gradients of gradients.
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace spmd {

// --- Elementwise, broadcasting ------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a,
               const Tensor& b);  // the gradient goes to the larger (half each on ties)
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& t, double s);
Tensor sub(const Tensor& t, double s);
Tensor sub(double s, const Tensor& t);
Tensor mul(const Tensor& t, double s);
Tensor div(const Tensor& t, double s);
Tensor div(double s, const Tensor& t);
Tensor pow(const Tensor& t, double exponent);
Tensor clamp(const Tensor& t, double low, double high);  // zero gradient outside [low, high]

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& t, double s);
Tensor operator-(const Tensor& t, double s);
Tensor operator*(const Tensor& t, double s);
Tensor operator/(const Tensor& t, double s);
Tensor operator+(double s, const Tensor& t);
Tensor operator-(double s, const Tensor& t);
Tensor operator*(double s, const Tensor& t);
Tensor operator/(double s, const Tensor& t);
Tensor operator-(const Tensor& t);

Tensor neg(const Tensor& t);
Tensor abs(const Tensor& t);
Tensor exp(const Tensor& t);
Tensor log(const Tensor& t);
Tensor sqrt(const Tensor& t);
Tensor rsqrt(const Tensor& t);
Tensor square(const Tensor& t);
Tensor reciprocal(const Tensor& t);
Tensor sin(const Tensor& t);
Tensor cos(const Tensor& t);
Tensor tanh(const Tensor& t);
Tensor sigmoid(const Tensor& t);
Tensor relu(const Tensor& t);
// approximate = true: GPT-2's tanh form; false: the exact erf form.
Tensor gelu(const Tensor& t, bool approximate = true);
Tensor silu(const Tensor& t);

// cond ? a : b (cond bool, no gradient); the gradient goes to the chosen side.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& t, const Tensor& mask, double value);
Tensor tril(const Tensor& t, int64_t diagonal = 0);
Tensor triu(const Tensor& t, int64_t diagonal = 0);

// --- Reductions ----------------------------------------------------------------
Tensor sum(const Tensor& t, const std::vector<int>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& t, const std::vector<int>& dims = {}, bool keepdim = false);
// The gradient goes to the maximal elements, shared equally among ties (as PyTorch's amax).
Tensor amax(const Tensor& t, const std::vector<int>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& t, const std::vector<int>& dims = {}, bool keepdim = false);

// --- Matrix products -------------------------------------------------------------
Tensor matmul(const Tensor& a, const Tensor& b);
// x @ weight^T + bias (bias may be undefined).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

// --- Views and copies ------------------------------------------------------------
Tensor view(const Tensor& t, const Shape& shape);
Tensor reshape(const Tensor& t, const Shape& shape);
Tensor flatten(const Tensor& t, int start_dim = 0, int end_dim = -1);
Tensor transpose(const Tensor& t, int dim0, int dim1);
Tensor permute(const Tensor& t, const std::vector<int>& order);
Tensor slice(const Tensor& t, int dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& t, int dim, int64_t start, int64_t length);
Tensor select(const Tensor& t, int dim, int64_t index);
Tensor expand(const Tensor& t, const Shape& shape);
Tensor squeeze(const Tensor& t, int dim);
Tensor unsqueeze(const Tensor& t, int dim);
Tensor contiguous(const Tensor& t);
Tensor clone(const Tensor& t);
// Converted to `dtype` (floating to floating is differentiable: the gradient
// is converted back).
Tensor to(const Tensor& t, DType dtype);
Tensor to(const Tensor& t, Device device);
Tensor cat(const std::vector<Tensor>& tensors, int dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int dim = 0);
std::vector<Tensor> split(const Tensor& t, int64_t split_size, int dim = 0);
std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int dim = 0);
std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int dim = 0);

// --- Indexing ----------------------------------------------------------------------
Tensor index_select(const Tensor& t, int dim, const Tensor& index);
Tensor gather(const Tensor& t, int dim, const Tensor& index);

}  // namespace spmd
