// Materializing a model that was laid out on the meta device: each rank
// allocates only the pieces it holds, and fills each with the values the
// whole parameter has there.
//
//   DefaultDeviceGuard meta(Device::meta());   // names and shapes, no bytes
//   auto model = std::make_shared<nn::Transformer>(config, seed);
//   ... tensor parallel, FSDP, a pipeline's split: placements decided ...
//   dist::materialize(model->named_parameters(), device,
//                     [&](auto& name, auto& box, auto& whole, auto& offset) {
//                       model->init_parameter(name, box, whole, offset); });
//
// A piece's placements (parallel/placement.h) say which blocks of the whole
// it holds; the model's init function fills a block knowing only where it
// sits (tensor/deferred.h), so no rank ever holds a parameter whole that it
// does not own, and the values equal the one-process model's bit for bit.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace spmd::dist {

// Fills `box`, the block at `offset` of parameter `name` whose whole shape
// is `whole`, with its initial values.
using InitFn = std::function<void(const std::string& name, const Tensor& box, const Shape& whole,
                                  const Shape& offset)>;

// Gives every meta tensor of `named` bytes on `device`, then its values,
// block by block. Tensors already on a device with bytes are left as they
// are. Returns the bytes it allocated. No communication.
size_t materialize(const std::vector<std::pair<std::string, Tensor>>& named, Device device,
                   const InitFn& init);

}  // namespace spmd::dist
