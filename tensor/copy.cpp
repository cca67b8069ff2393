// Copies between tensors, dtypes and devices. A copy that touches a GPU runs
// on the CUDA backend (which moves bytes between host and device); a CPU-only
// copy runs on the CPU backend; one that touches the meta device on its
// backend (a no-op into meta, an error out of it). Writing into a tensor bumps its storage's
// version, so autograd notices when a tensor it saved was overwritten.
#include "tensor/copy.h"

#include "tensor/backend.h"
#include "tensor/factory.h"
#include "tensor/views.h"

namespace spmd::ops {

const Tensor& copy_(const Tensor& dst, const Tensor& src) {
  const Tensor from = src.shape() == dst.shape() ? src : expand(src, dst.shape());
  Device on = dst.is_cuda() ? dst.device() : src.device();
  if (src.device().is_meta() || dst.device().is_meta()) on = Device::meta();
  Backend& backend = backend_for(on);
  backend.copy(from, dst);
  dst.storage()->bump_version();
  return dst;
}

Tensor clone(const Tensor& t) {
  Tensor out = empty(t.shape(), {t.dtype(), t.device()});
  backend_for(t.device()).copy(t, out);
  return out;
}

Tensor to(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = empty(t.shape(), {dtype, t.device()});
  backend_for(t.device()).copy(t, out);
  return out;
}

Tensor to(const Tensor& t, Device device) {
  if (t.device() == device) return t;
  Tensor out = empty(t.shape(), {t.dtype(), device});
  return copy_(out, t);
}

void synchronize(Device device) { backend_for(device).synchronize(device); }

}  // namespace spmd::ops
