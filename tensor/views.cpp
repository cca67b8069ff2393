// Views: each function works out a new (shape, strides, offset) over the same
// storage, checks it, and returns a handle; no element moves. reshape falls
// back to a copy only when no strides can express the new shape.
#include "tensor/views.h"

#include <numeric>
#include <optional>

#include "tensor/copy.h"

namespace spmd::ops {
namespace {

Tensor make_view(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset) {
  return Tensor(t.storage(), shape, strides, offset, t.dtype());
}

// `shape` with a -1 replaced by what makes its numel equal `numel`.
Shape infer_size(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < shape.ndim(); ++i) {
    if (shape[i] == -1) {
      SPMD_CHECK(infer < 0, op, ": only one dim may be -1, got ", shape);
      infer = i;
    } else {
      SPMD_CHECK(shape[i] >= 0, op, ": invalid size ", shape[i], " in ", shape);
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    SPMD_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape, " is invalid for ", numel,
               " elements");
    out[infer] = numel / known;
  }
  SPMD_CHECK(out.numel() == numel, op, ": shape ", shape, " is invalid for ", numel, " elements");
  return out;
}

// Strides that let a tensor of (old_shape, old_strides) be seen with
// new_shape, or nothing when its elements are not spaced that way. Dims are
// walked in chunks that are contiguous among themselves; each chunk of the
// old shape must be covered by whole dims of the new one.
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides,
                                  const Shape& new_shape) {
  Shape strides = new_shape;
  if (old_shape.ndim() == 0 || old_shape.numel() == 0) return contiguous_strides(new_shape);
  int view_d = new_shape.ndim() - 1;
  int64_t chunk_stride = old_strides.back(), old_numel = 1, view_numel = 1;
  for (int d = old_shape.ndim() - 1; d >= 0; --d) {
    old_numel *= old_shape[d];
    const bool chunk_ends =
        d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != old_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < old_numel || new_shape[view_d] == 1)) {
      strides[view_d] = view_numel * chunk_stride;
      view_numel *= new_shape[view_d];
      --view_d;
    }
    if (view_numel != old_numel) return std::nullopt;
    if (d > 0) {
      chunk_stride = old_strides[d - 1];
      old_numel = view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

}  // namespace

Tensor view(const Tensor& t, const Shape& shape) {
  const Shape target = infer_size(shape, t.numel(), "view");
  const std::optional<Shape> strides = view_strides(t.shape(), t.strides(), target);
  SPMD_CHECK(strides.has_value(), "view: a tensor of shape ", t.shape(), " and strides ",
             t.strides(), " cannot be viewed as ", target, " without a copy; use reshape");
  return make_view(t, target, *strides, t.offset());
}

Tensor reshape(const Tensor& t, const Shape& shape) {
  const Shape target = infer_size(shape, t.numel(), "reshape");
  if (auto strides = view_strides(t.shape(), t.strides(), target))
    return make_view(t, target, *strides, t.offset());
  return view(clone(t), target);
}

Tensor flatten(const Tensor& t, int start_dim, int end_dim) {
  if (t.ndim() == 0) return reshape(t, {1});
  const int s = wrap_dim(start_dim, t.ndim(), "flatten"),
            e = wrap_dim(end_dim, t.ndim(), "flatten");
  SPMD_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape shape;
  for (int d = 0; d < s; ++d) shape.push_back(t.size(d));
  int64_t n = 1;
  for (int d = s; d <= e; ++d) n *= t.size(d);
  shape.push_back(n);
  for (int d = e + 1; d < t.ndim(); ++d) shape.push_back(t.size(d));
  return reshape(t, shape);
}

Tensor transpose(const Tensor& t, int dim0, int dim1) {
  if (t.ndim() == 0) return t;
  const int a = wrap_dim(dim0, t.ndim(), "transpose"), b = wrap_dim(dim1, t.ndim(), "transpose");
  Shape shape = t.shape(), strides = t.strides();
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  return make_view(t, shape, strides, t.offset());
}

Tensor permute(const Tensor& t, const std::vector<int>& order) {
  SPMD_CHECK(int(order.size()) == t.ndim(), "permute: ", order.size(),
             " dims given for a tensor of shape ", t.shape());
  Shape shape = t.shape(), strides = t.strides();
  std::vector<bool> seen(size_t(t.ndim()), false);
  for (int i = 0; i < t.ndim(); ++i) {
    const int d = wrap_dim(order[i], t.ndim(), "permute");
    SPMD_CHECK(!seen[d], "permute: dim ", order[i], " appears twice");
    seen[d] = true;
    shape[i] = t.size(d);
    strides[i] = t.stride(d);
  }
  return make_view(t, shape, strides, t.offset());
}

Tensor slice(const Tensor& t, int dim, int64_t start, int64_t end, int64_t step) {
  const int d = wrap_dim(dim, t.ndim(), "slice");
  SPMD_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t size = t.size(d);
  auto clamp = [size](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + size : i, 0, size); };
  start = clamp(start);
  end = std::max(clamp(end), start);
  Shape shape = t.shape(), strides = t.strides();
  shape[d] = (end - start + step - 1) / step;
  strides[d] *= step;
  return make_view(t, shape, strides, t.offset() + start * t.stride(d));
}

Tensor narrow(const Tensor& t, int dim, int64_t start, int64_t length) {
  const int d = wrap_dim(dim, t.ndim(), "narrow");
  const int64_t size = t.size(d);
  if (start < 0) start += size;
  SPMD_CHECK(start >= 0 && length >= 0 && start + length <= size, "narrow: [", start, ", ",
             start + length, ") is out of range for dim ", dim, " of size ", size, " (shape ",
             t.shape(), ")");
  Shape shape = t.shape();
  shape[d] = length;
  return make_view(t, shape, t.strides(), t.offset() + start * t.stride(d));
}

Tensor select(const Tensor& t, int dim, int64_t index) {
  const int d = wrap_dim(dim, t.ndim(), "select");
  const int64_t size = t.size(d);
  SPMD_CHECK(index >= -size && index < size, "select: index ", index, " is out of range for dim ",
             dim, " of size ", size);
  if (index < 0) index += size;
  Shape shape = t.shape(), strides = t.strides();
  shape.erase(d);
  strides.erase(d);
  return make_view(t, shape, strides, t.offset() + index * t.stride(d));
}

Tensor expand(const Tensor& t, const Shape& shape) {
  const int nd = shape.ndim(), lead = nd - t.ndim();
  SPMD_CHECK(lead >= 0, "expand: cannot expand shape ", t.shape(), " to fewer dims ", shape);
  Shape sizes = shape, strides = shape;
  for (int i = 0; i < nd; ++i) {
    const int j = i - lead;  // the matching dim of t, when there is one
    if (j < 0) {
      SPMD_CHECK(shape[i] >= 0, "expand: new leading dim ", i, " of ", shape, " needs a size");
      strides[i] = 0;
      continue;
    }
    const int64_t have = t.size(j), want = shape[i] == -1 ? have : shape[i];
    SPMD_CHECK(have == want || have == 1, "expand: shape ", t.shape(), " cannot expand to ", shape,
               " (dim ", i, ": ", have, " vs ", want, ")");
    sizes[i] = want;
    strides[i] = have == want ? t.stride(j) : 0;
  }
  return make_view(t, sizes, strides, t.offset());
}

Tensor expand_as(const Tensor& t, const Tensor& other) { return expand(t, other.shape()); }

Tensor squeeze(const Tensor& t, int dim) {
  if (t.ndim() == 0) return t;
  const int d = wrap_dim(dim, t.ndim(), "squeeze");
  if (t.size(d) != 1) return t;
  Shape shape = t.shape(), strides = t.strides();
  shape.erase(d);
  strides.erase(d);
  return make_view(t, shape, strides, t.offset());
}

Tensor squeeze(const Tensor& t) {
  Shape shape, strides;
  for (int d = 0; d < t.ndim(); ++d) {
    if (t.size(d) == 1) continue;
    shape.push_back(t.size(d));
    strides.push_back(t.stride(d));
  }
  return make_view(t, shape, strides, t.offset());
}

Tensor unsqueeze(const Tensor& t, int dim) {
  const int d = wrap_dim(dim, t.ndim() + 1, "unsqueeze");
  Shape shape = t.shape(), strides = t.strides();
  const int64_t stride = d < t.ndim() ? t.size(d) * t.stride(d) : 1;
  shape.insert(d, 1);
  strides.insert(d, stride);
  return make_view(t, shape, strides, t.offset());
}

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : clone(t); }

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int nd = std::max(a.ndim(), b.ndim());
  Shape out;
  for (int i = 0; i < nd; ++i) {
    const int ia = i - (nd - a.ndim()), ib = i - (nd - b.ndim());
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    SPMD_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
               " do not broadcast (dim ", i, ": ", da, " vs ", db, ")");
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

}  // namespace spmd::ops
