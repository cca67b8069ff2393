// Index tensors checked on the GPU, their errors reported at the next wait.
//
// A gather, an embedding lookup or a cross-entropy target must be in range,
// and a kernel cannot throw. Reading the answer back at each such op would
// make the CPU wait for the GPU four to six times per training step (both
// embeddings and the cross-entropy, forward and backward), each wait
// draining the queue of launched work. Instead the op queues a check that,
// when it finds a bad index, writes the first one into a record the host can
// read without a copy (mapped pinned memory), and the op's kernel skips bad
// indices, touching nothing outside its tensors. The host looks at the record
// whenever it waits for the device anyway: a copy to the host (item(),
// to(cpu)), cuda::synchronize, Stream::synchronize and Event::synchronize.
// There it throws the InvalidArgument the op would have thrown, naming the op,
// the position, the value and the size; the results computed since are not
// to be trusted, and the error says so.
//
// Internal to tensor/cuda/ (CUDA builds only).
#pragma once

#include "tensor/cuda/context.h"

namespace spmd::cuda::detail {

// Queues the range check of `index` against [0, size) for `op` (a string
// literal) on the launch's stream; `ignore` (when has_ignore) is allowed too.
void check_indices(const Launch& launch, const Tensor& index, int64_t size, const char* op,
                   bool has_ignore = false, int64_t ignore = 0);

// Throws the first index error the checks queued on `device` have found, if
// any, and clears it. REQUIRES: the caller has waited for the work it wants
// covered (a check still running is reported at a later call).
void throw_index_errors(int device);

}  // namespace spmd::cuda::detail
