// Copies that cross a device boundary: host to GPU, GPU to host, and GPU to
// another GPU. Host memory from the CPU allocator is pageable, and the GPU's
// copy engines can only read and write page-locked memory, so the bytes go
// through two pinned staging buffers used alternately: while the copy engine
// moves one chunk, the CPU fills (or drains) the other.
//
// Host to device returns once the bytes are in the staging buffers (the
// last chunk may still be moving); the host source may be reused at once.
// Device to host returns when the bytes are in host memory; having waited,
// it reports an index error the GPU found meanwhile (index_errors.h). Both
// order themselves after the work already queued on the device's current
// stream.
// Strided tensors or a change of dtype are handled on the side where the
// data is: a contiguous temporary is made there first.
#pragma once

#include "tensor/tensor.h"

namespace spmd::cuda::detail {

void copy_host_to_device(const Tensor& src, const Tensor& dst);
void copy_device_to_host(const Tensor& src, const Tensor& dst);
// Between two different GPUs (peer access through cudaMemcpyPeerAsync).
void copy_device_to_device(const Tensor& src, const Tensor& dst);

}  // namespace spmd::cuda::detail
