// Differentiable views, copies, joins and indexing. A view's backward turns
// the gradient back into the viewed tensor's shape: reshape back, transpose
// back, or write it into the selected part of a zero tensor (slices). Joins
// hand each input its piece of the gradient; split is the reverse, one node
// with several outputs whose backward is a cat.
#include "autograd/function.h"
#include "autograd/node.h"
#include "autograd/tensor_ops.h"
#include "tensor/ops.h"

namespace spmd {
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

namespace {

// Records a one-input op whose gradient is fn(g).
template <class F>
Tensor simple(const char* name, const Tensor& t, Tensor out, F fn) {
  if (!autograd::needs_grad({&t})) return out;
  return record(name, {&t}, out, [fn](const Tensor& g) { return TensorList{fn(g)}; });
}

// The gradient of a part of a tensor of `shape`: zeros with g written where
// `part` (a view-making function) selects.
template <class Part>
Tensor scatter_into_zeros(const Tensor& g, const Shape& shape, Part part) {
  Tensor full = ops::zeros(shape, {g.dtype(), g.device()});
  ops::copy_(part(full), g);
  return full;
}

// split's node: k outputs, each a piece of the input along dim; the input's
// gradient is the pieces' gradients joined back together.
struct SplitFn : autograd::Function<SplitFn> {
  static constexpr const char* kName = "split";
  static TensorList forward(autograd::FunctionCtx& ctx, const Tensor& t,
                            const std::vector<int64_t>& sizes, int dim) {
    ctx.set("dim", dim);
    return ops::split(t, sizes, dim);
  }
  static TensorList backward(autograd::FunctionCtx& ctx, const TensorList& grads) {
    return {ops::cat(grads, ctx.get<int>("dim"))};
  }
};

}  // namespace

// --- Views ---------------------------------------------------------------------

Tensor view(const Tensor& t, const Shape& shape) {
  return simple("view", t, ops::view(t, shape),
                [s = t.shape()](const Tensor& g) { return ops::reshape(g, s); });
}
Tensor reshape(const Tensor& t, const Shape& shape) {
  return simple("reshape", t, ops::reshape(t, shape),
                [s = t.shape()](const Tensor& g) { return ops::reshape(g, s); });
}
Tensor flatten(const Tensor& t, int start_dim, int end_dim) {
  return simple("flatten", t, ops::flatten(t, start_dim, end_dim),
                [s = t.shape()](const Tensor& g) { return ops::reshape(g, s); });
}
Tensor squeeze(const Tensor& t, int dim) {
  return simple("squeeze", t, ops::squeeze(t, dim),
                [s = t.shape()](const Tensor& g) { return ops::reshape(g, s); });
}
Tensor unsqueeze(const Tensor& t, int dim) {
  return simple("unsqueeze", t, ops::unsqueeze(t, dim),
                [s = t.shape()](const Tensor& g) { return ops::reshape(g, s); });
}
Tensor transpose(const Tensor& t, int dim0, int dim1) {
  return simple("transpose", t, ops::transpose(t, dim0, dim1),
                [dim0, dim1](const Tensor& g) { return ops::transpose(g, dim0, dim1); });
}
Tensor permute(const Tensor& t, const std::vector<int>& order) {
  Tensor out = ops::permute(t, order);  // checks the order
  std::vector<int> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    inverse[size_t(wrap_dim(order[i], t.ndim(), "permute"))] = int(i);
  }
  return simple("permute", t, out, [inverse](const Tensor& g) { return ops::permute(g, inverse); });
}
Tensor slice(const Tensor& t, int dim, int64_t start, int64_t end, int64_t step) {
  return simple("slice", t, ops::slice(t, dim, start, end, step),
                [s = t.shape(), dim, start, end, step](const Tensor& g) {
                  return scatter_into_zeros(
                      g, s, [&](const Tensor& f) { return ops::slice(f, dim, start, end, step); });
                });
}
Tensor narrow(const Tensor& t, int dim, int64_t start, int64_t length) {
  return simple("narrow", t, ops::narrow(t, dim, start, length),
                [s = t.shape(), dim, start, length](const Tensor& g) {
                  return scatter_into_zeros(
                      g, s, [&](const Tensor& f) { return ops::narrow(f, dim, start, length); });
                });
}
Tensor select(const Tensor& t, int dim, int64_t index) {
  return simple("select", t, ops::select(t, dim, index),
                [s = t.shape(), dim, index](const Tensor& g) {
                  return scatter_into_zeros(
                      g, s, [&](const Tensor& f) { return ops::select(f, dim, index); });
                });
}
Tensor expand(const Tensor& t, const Shape& shape) {
  return simple("expand", t, ops::expand(t, shape),
                [s = t.shape()](const Tensor& g) { return ops::sum_to(g, s); });
}

// --- Copies ------------------------------------------------------------------------

Tensor contiguous(const Tensor& t) {
  return simple("contiguous", t, ops::contiguous(t), [](const Tensor& g) { return g; });
}
Tensor clone(const Tensor& t) {
  return simple("clone", t, ops::clone(t), [](const Tensor& g) { return g; });
}
Tensor to(const Tensor& t, DType dtype) {
  Tensor out = ops::to(t, dtype);
  if (!is_floating(dtype)) return out;  // integers carry no gradient
  return simple("to", t, out, [from = t.dtype()](const Tensor& g) { return ops::to(g, from); });
}
Tensor to(const Tensor& t, Device device) {
  return simple("to", t, ops::to(t, device),
                [from = t.device()](const Tensor& g) { return ops::to(g, from); });
}

// --- Joins and splits ------------------------------------------------------------------

Tensor cat(const std::vector<Tensor>& tensors, int dim) {
  Tensor out = ops::cat(tensors, dim);
  if (!autograd::needs_grad(tensors)) return out;
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) sizes.push_back(t.size(dim));
  return record("cat", tensors, out, [sizes, dim](const Tensor& g) {
    TensorList grads;
    int64_t start = 0;
    for (int64_t size : sizes) {
      grads.push_back(ops::narrow(g, dim, start, size));
      start += size;
    }
    return grads;
  });
}

Tensor stack(const std::vector<Tensor>& tensors, int dim) {
  Tensor out = ops::stack(tensors, dim);
  if (!autograd::needs_grad(tensors)) return out;
  return record("stack", tensors, out, [n = tensors.size(), dim](const Tensor& g) {
    TensorList grads;
    for (size_t i = 0; i < n; ++i) grads.push_back(ops::select(g, dim, int64_t(i)));
    return grads;
  });
}

std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int dim) {
  return SplitFn::apply(t, sizes, wrap_dim(dim, t.ndim(), "split"));
}

std::vector<Tensor> split(const Tensor& t, int64_t split_size, int dim) {
  std::vector<int64_t> sizes;
  for (const Tensor& piece : ops::split(t, split_size, dim)) sizes.push_back(piece.size(dim));
  return split(t, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int dim) {
  std::vector<int64_t> sizes;
  for (const Tensor& piece : ops::chunk(t, chunks, dim)) sizes.push_back(piece.size(dim));
  return split(t, sizes, dim);
}

// --- Indexing ---------------------------------------------------------------------------

Tensor index_select(const Tensor& t, int dim, const Tensor& index) {
  return simple("index_select", t, ops::index_select(t, dim, index),
                [s = t.shape(), dim, si = SavedTensor(index)](const Tensor& g) {
                  Tensor full = ops::zeros(s, {g.dtype(), g.device()});
                  return ops::index_add_(full, dim, si.get(), g);
                });
}

Tensor gather(const Tensor& t, int dim, const Tensor& index) {
  return simple("gather", t, ops::gather(t, dim, index),
                [s = t.shape(), dim, si = SavedTensor(index)](const Tensor& g) {
                  Tensor full = ops::zeros(s, {g.dtype(), g.device()});
                  return ops::scatter_add_(full, dim, si.get(), g);
                });
}

}  // namespace spmd
