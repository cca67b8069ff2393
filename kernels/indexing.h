// Indexing kernels: index_select and its backward index_add (the embedding's
// forward and backward), gather and its backward scatter_add, and the range
// check of an index tensor. Indices are i64 or i32, any strides. The adding
// kernels use atomics, so repeated indices accumulate (in an order that may
// vary from run to run, as in PyTorch on CUDA).
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

// Looks for an element of `index` outside [0, size) that is not `ignore`
// (when has_ignore). Returns true and sets *position (row-major) and *value
// when there is one. Waits for the stream: the answer is read back to the host.
bool find_out_of_range(const TensorArg& index, int64_t size, bool has_ignore, int64_t ignore,
                       int64_t* position, int64_t* value, Scratch& scratch, Stream stream);

}  // namespace spmd::kernels
