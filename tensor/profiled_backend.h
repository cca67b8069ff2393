// The Backend that the profiler (runtime/profiler.h) sees through: every
// method opens a ProfileScope named for the op ("matmul", "add",
// "layer_norm_backward", "allocate"...), notes the bytes it reads and writes
// and, where they are known, its FLOPs, then calls the real backend.
// backend_for() hands it out instead of the real one while the profiler is
// on, so the ops themselves carry no profiling code and cost one branch when
// it is off.
#pragma once

#include "tensor/backend.h"

namespace spmd {

// The profiling wrapper of `inner` (one per backend, made at first use).
Backend& profiled_backend(Backend& inner);

}  // namespace spmd
