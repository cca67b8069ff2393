// materialize(): allocate this rank's pieces, then fill their blocks.
#include "parallel/materialize.h"

#include "parallel/placement.h"
#include "tensor/deferred.h"

namespace spmd::dist {

size_t materialize(const std::vector<std::pair<std::string, Tensor>>& named, Device device,
                   const InitFn& init) {
  size_t bytes = 0;
  for (const auto& [name, t] : named) {
    if (!t.device().is_meta()) continue;
    ops::materialize_(t, device);
    bytes += t.storage()->nbytes();
    const LayoutMeta* layout = placements_of(t);
    const Shape& whole = layout ? whole_shape(*layout) : t.shape();
    for (const Block& b : local_blocks(t))
      init(name, box_view(t, b.local_offset, b.size), whole, b.global_offset);
  }
  return bytes;
}

}  // namespace spmd::dist
