// Deferred tensors: a meta tensor (tensor/device.h) given bytes, and a
// parameter's initial values drawn for any box of it.
//
// A model too large for one device is built on the meta device (names,
// shapes, dtypes; no bytes), laid out by the parallel strategies, and only
// then does each rank allocate its own pieces (materialize_) and fill them.
// For a rank to fill its piece without the rest, an initial value must
// depend on nothing but where it sits: element g of a parameter (g its
// row-major index in the whole tensor) is lane g % 4 of
// philox4x32(key, g / 4), the key a hash of the run's seed and the
// parameter's name (init_key). That is exactly the draw of
// ops::normal(whole, mean, std, {}, &Generator(key)), so the one-process
// model, which draws its parameters whole, holds the same bits as the
// pieces of any layout (docs/memory.md).
#pragma once

#include <string_view>

#include "tensor/shape.h"
#include "tensor/tensor.h"

namespace spmd::ops {

// Gives a meta tensor's storage uninitialized bytes on `device`: every view
// of that storage is then a tensor on `device`. A released meta storage
// (an FSDP unit's gathered parameter between uses) takes the device and
// stays without bytes. No-op for a tensor that is not on meta.
void materialize_(const Tensor& t, Device device);

// The key of a named parameter's draws: its name hashed (64-bit FNV-1a) and
// mixed with `seed` (SplitMix64's finalizer), so every parameter draws from
// a stream of its own, whatever the shapes of the others or the order in
// which a layout makes them.
uint64_t init_key(uint64_t seed, std::string_view name);

// Writes into `box` the elements of normal(mean, std) drawn for a whole
// tensor of shape `whole` with Generator(key) from offset 0, at the box's
// place: box[i] = draw[offset + i] for every index i of box. Bit for bit
// those of the whole draw. REQUIRES: box floating, of whole's rank, and
// offset + box.shape() within whole (checked).
void normal_box_(const Tensor& box, double mean, double std, uint64_t key, const Shape& whole,
                 const Shape& offset);

}  // namespace spmd::ops
