// Views: new shapes, strides and offsets over the same storage. None of these
// copy (reshape copies only when no view can express the result, as PyTorch's
// does). Writing through a view writes the original.
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace spmd::ops {

// Same elements, new shape; one size may be -1 (inferred). REQUIRES: the
// tensor's layout allows it without a copy (view), else use reshape.
Tensor view(const Tensor& t, const Shape& shape);
// As view when possible, otherwise a contiguous copy.
Tensor reshape(const Tensor& t, const Shape& shape);
// All dims flattened from start_dim to end_dim (inclusive) into one.
Tensor flatten(const Tensor& t, int start_dim = 0, int end_dim = -1);
Tensor transpose(const Tensor& t, int dim0, int dim1);
// Dims reordered: result dim i is t's dim order[i].
Tensor permute(const Tensor& t, const std::vector<int>& order);
// Elements start, start+step, ... < end along dim (Python's t[start:end:step]);
// start and end are clamped to the size and may be negative.
Tensor slice(const Tensor& t, int dim, int64_t start, int64_t end, int64_t step = 1);
// `length` elements from `start` along dim. REQUIRES: within bounds.
Tensor narrow(const Tensor& t, int dim, int64_t start, int64_t length);
// The slice at `index` along dim, with that dim removed (Python's t[..., i, ...]).
Tensor select(const Tensor& t, int dim, int64_t index);
// Size-1 dims repeated to `shape` (stride 0); -1 keeps a size. New leading dims
// may be added.
Tensor expand(const Tensor& t, const Shape& shape);
Tensor expand_as(const Tensor& t, const Tensor& other);
// Without the size-1 dim `dim` (or every size-1 dim).
Tensor squeeze(const Tensor& t, int dim);
Tensor squeeze(const Tensor& t);
// With a new size-1 dim inserted at `dim` (0..ndim).
Tensor unsqueeze(const Tensor& t, int dim);
// The tensor itself when contiguous, else a contiguous copy.
Tensor contiguous(const Tensor& t);

// The shape two broadcast operands meet in (numpy rules); throws naming `op`
// and both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace spmd::ops
