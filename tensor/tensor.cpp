// The Tensor handle: layout queries and the autograd fields.
#include "tensor/tensor.h"

#include "tensor/autograd_meta.h"
#include "tensor/backend.h"

namespace spmd {

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset,
               DType dtype)
    : impl_(std::make_shared<Impl>()) {
  SPMD_CHECK(storage != nullptr, "Tensor: null storage");
  SPMD_CHECK(shape.ndim() == strides.ndim(), "Tensor: shape ", shape, " and strides ", strides,
             " differ in length");
  // The lowest and highest element the view can reach must lie in the storage.
  int64_t lo = offset, hi = offset;
  bool empty = false;
  for (int i = 0; i < shape.ndim(); ++i) {
    SPMD_CHECK(shape[i] >= 0, "Tensor: negative size in shape ", shape);
    if (shape[i] == 0) empty = true;
    const int64_t reach = (shape[i] - 1) * strides[i];
    (reach < 0 ? lo : hi) += reach;
  }
  if (!empty) {
    const int64_t capacity = int64_t(storage->nbytes() / element_size(dtype));
    SPMD_CHECK(lo >= 0 && hi < capacity, "Tensor: a view of shape ", shape, ", strides ", strides,
               " at offset ", offset, " reaches outside its storage of ", capacity, " ",
               dtype_name(dtype), " elements");
  }
  impl_->storage = std::move(storage);
  impl_->shape = shape;
  impl_->strides = strides;
  impl_->offset = offset;
  impl_->dtype = dtype;
}

const Tensor::Impl& Tensor::impl() const {
  SPMD_CHECK(impl_ != nullptr, "use of an undefined tensor");
  return *impl_;
}
Tensor::Impl& Tensor::impl() {
  SPMD_CHECK(impl_ != nullptr, "use of an undefined tensor");
  return *impl_;
}

int64_t Tensor::size(int dim) const { return shape()[wrap_dim(dim, ndim(), "Tensor::size")]; }
int64_t Tensor::stride(int dim) const { return strides()[wrap_dim(dim, ndim(), "Tensor::stride")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;  // the stride of a size-1 dim never matters
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  SPMD_CHECK(!device().is_meta(), "this tensor is on the meta device: it has a shape (", shape(),
             ") but no values until it is materialized (tensor/deferred.h)");
  SPMD_CHECK(!storage()->is_released(),
             "this tensor's bytes were released (an FSDP parameter read while its unit is "
             "sharded: call the module, or unshard() it, first)");
  return static_cast<char*>(storage()->data()) + offset() * int64_t(element_size(dtype()));
}

double Tensor::item_as_double() const {
  SPMD_CHECK(numel() == 1, "item: expected a one-element tensor, got shape ", shape());
  Tensor host = *this;
  if (!is_cpu()) {
    Backend& cpu = backend_for(Device::cpu());
    host = Tensor(std::make_shared<Storage>(cpu.allocate(element_size(dtype()), Device::cpu()),
                                            element_size(dtype()), Device::cpu()),
                  shape(), contiguous_strides(shape()), 0, dtype());
    backend_for(device()).copy(*this, host);
  }
  return visit_dtype(dtype(), [&]<class T>() { return double(*host.data<T>()); });
}

// --- Autograd fields -------------------------------------------------------

AutogradMeta& Tensor::ensure_autograd_meta() {
  if (!impl().autograd) impl().autograd = std::make_shared<AutogradMeta>();
  return *impl().autograd;
}

bool Tensor::requires_grad() const { return autograd_meta() && autograd_meta()->requires_grad; }

Tensor& Tensor::requires_grad_(bool requires_grad) {
  SPMD_CHECK(!requires_grad || is_floating(dtype()),
             "requires_grad_: only floating-point tensors can require gradients, got ",
             dtype_name(dtype()));
  SPMD_CHECK(is_leaf(),
             "requires_grad_: can only be set on a leaf tensor (one no recorded "
             "operation produced); use detach() first");
  ensure_autograd_meta().requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const { return autograd_meta() ? autograd_meta()->grad : Tensor(); }

void Tensor::set_grad(const Tensor& grad) {
  if (grad.defined()) {
    SPMD_CHECK(grad.shape() == shape(), "set_grad: gradient of shape ", grad.shape(),
               " for a tensor of shape ", shape());
  }
  ensure_autograd_meta().grad = grad;
}

bool Tensor::is_leaf() const { return !autograd_meta() || autograd_meta()->grad_fn == nullptr; }

}  // namespace spmd
