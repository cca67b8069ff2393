// Full state dicts: gathered with full_tensor, loaded block by block.
#include "parallel/fsdp/state_dict.h"

#include "autograd/grad_mode.h"
#include "parallel/placement.h"
#include "tensor/ops.h"

namespace spmd::dist {

TensorMap full_state_dict(const nn::Module& model) {
  TensorMap out;
  for (const auto& [name, t] : model.state_dict()) {
    const Tensor whole = full_tensor(t);
    out[name] = whole.is_same(t) ? ops::clone(t) : whole;
  }
  return out;
}

void load_full_state_dict(nn::Module& model, const TensorMap& full, bool strict) {
  NoGradGuard no_grad;
  const TensorMap mine = model.state_dict();
  if (strict) {
    for (const auto& [name, t] : full) {
      SPMD_CHECK(mine.count(name), "load_full_state_dict: the model has no tensor ", name);
    }
  }
  for (const auto& [name, local] : mine) {
    auto it = full.find(name);
    if (it == full.end()) {
      SPMD_CHECK(!strict, "load_full_state_dict: ", name, " is missing from the state dict");
      continue;
    }
    const Tensor& whole = it->second;
    const LayoutMeta* layout = placements_of(local);
    const Shape& want = layout ? whole_shape(*layout) : local.shape();
    SPMD_CHECK(whole.shape() == want, "load_full_state_dict: ", name, " is ", whole.shape(),
               " in the state dict but ", want, " in the model");
    if (layout == nullptr) {
      ops::copy_(local, whole);
      continue;
    }
    for (const Block& b : local_blocks(*layout, layout->mesh.coordinate())) {
      Tensor dst = local, src = whole;
      for (int d = 0; d < b.size.ndim(); ++d) {
        dst = ops::narrow(dst, d, b.local_offset[d], b.size[d]);
        src = ops::narrow(src, d, b.global_offset[d], b.size[d]);
      }
      ops::copy_(dst, ops::to(src, local.device()));
    }
  }
}

}  // namespace spmd::dist
