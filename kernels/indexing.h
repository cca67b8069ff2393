// Indexing kernels: index_select and its backward index_add (the embedding's
// forward and backward), gather and its backward scatter_add, and the range
// check of an index tensor. Indices are i64 or i32, any strides. The adding
// kernels use atomics, so repeated indices accumulate (in an order that may
// vary from run to run, as in PyTorch on CUDA). An index out of range is
// skipped by all four (nothing outside the tensors is touched); the range
// check below finds it and tells the host.
#pragma once

#include "kernels/types.h"

namespace spmd::kernels {

// out = x.index_select(dim, index); index is 1-D.
void index_select(const TensorArg& x, int dim, const TensorArg& index, const TensorArg& out,
                  Stream stream);
// out.index_select(dim, index) += src.
void index_add(const TensorArg& out, int dim, const TensorArg& index, const TensorArg& src,
               Stream stream);
// out[i][j] = x[i][index[i][j]] (dim 1; likewise for any dim); out has index's shape.
void gather(const TensorArg& x, int dim, const TensorArg& index, const TensorArg& out,
            Stream stream);
// out[i][index[i][j]] += src[i][j] (dim 1; likewise for any dim); src has index's shape.
void scatter_add(const TensorArg& out, int dim, const TensorArg& index, const TensorArg& src,
                 Stream stream);

// The first bad index a range check found, in memory the host reads once it
// has waited for the GPU (tensor/cuda/index_errors.h). `check` stays 0 until
// a check finds one, then holds the id that check was given.
struct IndexRangeError {
  int64_t check;
  int64_t position;  // row-major position of the first bad element
  int64_t value;
};

// Queues a search of `index` (i64 or i32) for an element outside [0, size)
// that is not `ignore` (when has_ignore), and returns without waiting. When
// it finds one and `*claim` (device memory) is still 0, it sets *claim to 1
// and fills *record (mapped host memory, its device address) with `check`
// (> 0), the first such position and its value; later finds leave both alone.
void check_index_range(const TensorArg& index, int64_t size, bool has_ignore, int64_t ignore,
                       int64_t check, int* claim, IndexRangeError* record, Scratch& scratch,
                       Stream stream);

}  // namespace spmd::kernels
