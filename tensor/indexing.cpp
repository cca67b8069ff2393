// Indexing, joining and splitting. The index ops check shapes and dtypes and
// call the backend (which checks index values); cat writes each input into a
// narrow view of the output; split and chunk return narrow views.
#include "tensor/indexing.h"

#include "tensor/backend.h"
#include "tensor/copy.h"
#include "tensor/factory.h"
#include "tensor/views.h"

namespace spmd::ops {
namespace {

// An integer index tensor as i64 (the backends' index type).
Tensor index_i64(const Tensor& index, const char* op) {
  SPMD_CHECK(index.dtype() == DType::kI64 || index.dtype() == DType::kI32, op,
             ": index must be i64 or i32, got ", dtype_name(index.dtype()));
  return to(index, DType::kI64);
}

// REQUIRES of gather and scatter_add: index has t's ndim and is no larger
// than `bound` in any dim except (when skip_dim) `dim`.
void check_index_shape(const Tensor& t, int dim, const Tensor& index, const Tensor& bound,
                       bool skip_dim, const char* op) {
  SPMD_CHECK(index.ndim() == t.ndim(), op, ": index ", index.shape(), " must have as many dims ",
             "as the tensor ", t.shape());
  for (int d = 0; d < t.ndim(); ++d) {
    if (skip_dim && d == dim) continue;
    SPMD_CHECK(index.size(d) <= bound.size(d), op, ": index ", index.shape(), " is larger than ",
               bound.shape(), " in dim ", d);
  }
}

}  // namespace

Tensor index_select(const Tensor& t, int dim, const Tensor& index) {
  const int d = wrap_dim(dim, t.ndim(), "index_select");
  SPMD_CHECK(index.ndim() <= 1, "index_select: index must be 1-D, got ", index.shape());
  const Tensor idx = index_i64(index, "index_select");
  Shape shape = t.shape();
  shape[d] = idx.numel();
  Tensor out = empty(shape, {t.dtype(), t.device()});
  backend_for({&t, &idx}, "index_select").index_select(t, d, idx, out);
  return out;
}

Tensor& index_add_(Tensor& t, int dim, const Tensor& index, const Tensor& src) {
  const int d = wrap_dim(dim, t.ndim(), "index_add_");
  SPMD_CHECK(index.ndim() <= 1, "index_add_: index must be 1-D, got ", index.shape());
  const Tensor idx = index_i64(index, "index_add_");
  Shape expected = t.shape();
  expected[d] = idx.numel();
  SPMD_CHECK(src.shape() == expected, "index_add_: src ", src.shape(), " should be ", expected,
             " (the tensor ", t.shape(), " with dim ", dim, " of the index's length)");
  const Tensor s = to(src, t.dtype());
  backend_for({&t, &idx, &s}, "index_add_").index_add(t, d, idx, s);
  t.storage()->bump_version();
  return t;
}

Tensor gather(const Tensor& t, int dim, const Tensor& index) {
  const int d = wrap_dim(dim, t.ndim(), "gather");
  check_index_shape(t, d, index, t, true, "gather");
  const Tensor idx = index_i64(index, "gather");
  Tensor out = empty(idx.shape(), {t.dtype(), t.device()});
  backend_for({&t, &idx}, "gather").gather(t, d, idx, out);
  return out;
}

Tensor& scatter_add_(Tensor& t, int dim, const Tensor& index, const Tensor& src) {
  const int d = wrap_dim(dim, t.ndim(), "scatter_add_");
  check_index_shape(t, d, index, t, true, "scatter_add_");
  check_index_shape(t, d, index, src, false, "scatter_add_");
  const Tensor idx = index_i64(index, "scatter_add_");
  const Tensor s = to(src, t.dtype());
  backend_for({&t, &idx, &s}, "scatter_add_").scatter_add(t, d, idx, s);
  t.storage()->bump_version();
  return t;
}

Tensor scatter_add(const Tensor& t, int dim, const Tensor& index, const Tensor& src) {
  Tensor out = clone(t);
  return scatter_add_(out, dim, index, src);
}

// --- Joining and splitting ----------------------------------------------------------

Tensor cat(const std::vector<Tensor>& tensors, int dim) {
  SPMD_CHECK(!tensors.empty(), "cat: expected at least one tensor");
  const Tensor& first = tensors[0];
  const int d = wrap_dim(dim, first.ndim(), "cat");
  Shape shape = first.shape();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    SPMD_CHECK(t.dtype() == first.dtype() && t.device() == first.device(), "cat: tensor ", i,
               " is ", dtype_name(t.dtype()), " on ", t.device(), ", tensor 0 is ",
               dtype_name(first.dtype()), " on ", first.device());
    bool match = t.ndim() == first.ndim();
    for (int k = 0; match && k < t.ndim(); ++k) match = k == d || t.size(k) == first.size(k);
    SPMD_CHECK(match, "cat: tensor ", i, " of shape ", t.shape(), " does not match tensor 0 ",
               first.shape(), " outside dim ", dim);
    shape[d] += t.size(d);
  }
  Tensor out = empty(shape, {first.dtype(), first.device()});
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    copy_(narrow(out, d, offset, t.size(d)), t);
    offset += t.size(d);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int dim) {
  SPMD_CHECK(!tensors.empty(), "stack: expected at least one tensor");
  const int d = wrap_dim(dim, tensors[0].ndim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    SPMD_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: tensor ", i, " has shape ",
               tensors[i].shape(), ", tensor 0 has ", tensors[0].shape());
    parts.push_back(unsqueeze(tensors[i], d));
  }
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& t, int64_t split_size, int dim) {
  const int d = wrap_dim(dim, t.ndim(), "split");
  const int64_t size = t.size(d);
  SPMD_CHECK(split_size > 0 || (split_size == 0 && size == 0), "split: split_size must be ",
             "positive, got ", split_size);
  if (size == 0) return {t};
  std::vector<Tensor> pieces;
  for (int64_t start = 0; start < size; start += split_size)
    pieces.push_back(narrow(t, d, start, std::min(split_size, size - start)));
  return pieces;
}

std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int dim) {
  const int d = wrap_dim(dim, t.ndim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    SPMD_CHECK(s >= 0, "split: negative size ", s);
    total += s;
  }
  SPMD_CHECK(total == t.size(d), "split: sizes sum to ", total, " but dim ", dim, " has size ",
             t.size(d));
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t s : sizes) {
    pieces.push_back(narrow(t, d, start, s));
    start += s;
  }
  return pieces;
}

std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int dim) {
  SPMD_CHECK(chunks > 0, "chunk: expected a positive number of chunks, got ", chunks);
  const int d = wrap_dim(dim, t.ndim(), "chunk");
  const int64_t size = t.size(d);
  if (size == 0) return std::vector<Tensor>(size_t(chunks), t);  // as torch.chunk
  return split(t, (size + chunks - 1) / chunks, d);
}

}  // namespace spmd::ops
