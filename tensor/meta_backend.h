// The backend of the meta device: tensors with a shape and no bytes.
//
// Every op's front end (tensor/ops.h) checks its operands and allocates its
// output's shape and dtype before it calls a backend, so on meta tensors the
// whole front end runs and yields meta tensors of the right shapes, while
// every method here does nothing. That is all a strategy needs to lay out a
// model it never holds: TP's slices, FSDP's shards and the experts' split are
// views, clones and concatenations, whose shapes come out right on meta.
//
// A copy into a meta tensor is a no-op; a copy out of one (its values asked
// for) throws, as does reading its elements (Tensor::raw_data), except in
// a dry run, where it reads zeros (MetaReadsAsZeros, meta_memory.h). An
// allocation makes no bytes but is counted (meta_memory.h).
#pragma once

#include "tensor/backend.h"

namespace spmd {

Backend& meta_backend();

}  // namespace spmd
