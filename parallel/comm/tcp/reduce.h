// The arithmetic of the TCP backend's reductions: elementwise loops on raw
// communication buffers, run chunk by chunk as data arrives so that reducing
// one chunk overlaps the transfer of the next. They work on raw pointers (not
// Tensors) because a chunk is a byte range of a staging buffer.
//
// bf16 and f16 are widened to f32, combined, and rounded back (to nearest
// even) per element, as NCCL does; integers wrap on overflow. The loops are
// written so the compiler vectorizes them; f16 uses the F16C conversion
// instructions where the CPU has them.
#pragma once

#include <cstddef>

#include "parallel/comm/types.h"

namespace spmd::dist::tcp {

// dst[i] = a[i] op b[i] for i < count. kAvg combines as kSum (divide at the
// end with divide() or combine_and_divide()). dst may be a or b (exactly),
// never a partial overlap.
void combine(ReduceOp op, DType dtype, void* dst, const void* a, const void* b, size_t count);

// dst[i] = (a[i] + b[i]) / divisor: the last step of an average, fused so the
// data is touched once. REQUIRES: a floating dtype.
void combine_and_divide(DType dtype, void* dst, const void* a, const void* b, size_t count,
                        int divisor);

// dst[i] /= divisor. REQUIRES: a floating dtype.
void divide(DType dtype, void* dst, size_t count, int divisor);

}  // namespace spmd::dist::tcp
