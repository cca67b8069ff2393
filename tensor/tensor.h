// Tensor: a cheap handle to a view of shared storage.
//
// A tensor is (storage, shape, strides, offset, dtype). Element [i0, i1, ...]
// lives at storage.data + (offset + i0*strides[0] + i1*strides[1] + ...) *
// element_size. Views (tensor/views.h) make new handles over the same storage
// with other shapes, strides and offsets; nothing is copied until contiguous()
// or an op needs it. Copying a Tensor copies the handle: both name the same
// tensor, as two Python variables bound to one torch.Tensor do.
//
// Operations are free functions: raw ones in spmd::ops (tensor/ops.h, no
// autograd), differentiable ones in spmd (autograd/). The Tensor itself only
// describes its memory and carries the autograd fields (requires_grad, grad,
// grad_fn) that autograd/ fills in.
//
// Thread-safety: a Tensor may be read from many threads; writing its elements
// or its autograd fields from two threads at once is a race, as in PyTorch.
#pragma once

#include <cstdint>
#include <memory>

#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/shape.h"
#include "tensor/storage.h"

namespace spmd {

struct AutogradMeta;  // tensor/autograd_meta.h
struct LayoutMeta;    // parallel/placement.h: where a sharded parameter sits in its global tensor

class Tensor {
 public:
  // An undefined tensor (defined() is false), like an empty torch.Tensor slot.
  Tensor() = default;
  // A view of `storage`. REQUIRES: every element the view can address lies
  // inside the storage (checked).
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset,
         DType dtype);

  bool defined() const { return impl_ != nullptr; }

  // --- Memory layout ------------------------------------------------------
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int ndim() const { return impl().shape.ndim(); }
  // Size and stride of one dim; negative dims count from the end.
  int64_t size(int dim) const;
  int64_t stride(int dim) const;
  int64_t offset() const { return impl().offset; }  // in elements, from the storage's start
  int64_t numel() const { return impl().shape.numel(); }
  size_t nbytes() const { return size_t(numel()) * element_size(dtype()); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  // True when the elements are laid out row-major with no gaps.
  bool is_contiguous() const;

  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  // Address of element [0, 0, ...]. data<T>() checks that T matches the dtype.
  void* raw_data() const;
  template <class T>
  T* data() const {
    SPMD_CHECK(dtype_of<T>() == dtype(), "Tensor::data: asked for ", dtype_name(dtype_of<T>()),
               " elements of a ", dtype_name(dtype()), " tensor");
    return static_cast<T*>(raw_data());
  }
  // The single element of a one-element tensor, converted to T (copied from
  // the GPU when the tensor lives there).
  template <class T>
  T item() const {
    return static_cast<T>(item_as_double());
  }
  double item_as_double() const;

  // True when both handles name the same tensor (not merely equal values).
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  // How many handles name this tensor (torch's use_count). Autograd adopts a
  // gradient as a leaf's .grad without a copy only when it holds the sole handle.
  long use_count() const { return impl_.use_count(); }

  // --- Autograd fields (filled in by autograd/) ----------------------------
  bool requires_grad() const;
  // Marks a leaf tensor as one whose gradient backward() should compute.
  Tensor& requires_grad_(bool requires_grad = true);
  // The accumulated gradient; undefined until a backward pass reaches it.
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  // A leaf is a tensor no recorded operation produced (parameters, inputs).
  bool is_leaf() const;
  AutogradMeta* autograd_meta() const { return impl().autograd.get(); }
  AutogradMeta& ensure_autograd_meta();

  // --- Distributed layout (filled in by parallel/) ------------------------
  // A parameter that a parallel strategy split carries how its local piece
  // sits in the global tensor (parallel/placement.h); null for any other.
  // Shared by every handle of this tensor; views and results of ops do not
  // inherit it.
  const std::shared_ptr<const LayoutMeta>& layout_meta() const { return impl().layout; }
  void set_layout_meta(std::shared_ptr<const LayoutMeta> meta) { impl().layout = std::move(meta); }

 private:
  struct Impl {
    std::shared_ptr<Storage> storage;
    Shape shape;
    Shape strides;
    int64_t offset = 0;
    DType dtype = DType::kF32;
    std::shared_ptr<AutogradMeta> autograd;
    std::shared_ptr<const LayoutMeta> layout;
  };
  const Impl& impl() const;
  Impl& impl();

  std::shared_ptr<Impl> impl_;
};

}  // namespace spmd
