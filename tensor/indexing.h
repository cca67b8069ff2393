// Indexing, joining and splitting. Index tensors are i64 (i32 accepted);
// an index out of range throws, naming the op, the index and the size.
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace spmd::ops {

// Slices of t along dim at the positions in `index` (1-D).
Tensor index_select(const Tensor& t, int dim, const Tensor& index);
// t.index_select(dim, index) += src, repeated indices accumulating. Returns t.
Tensor& index_add_(Tensor& t, int dim, const Tensor& index, const Tensor& src);
// out[i][j] = t[i][index[i][j]] (dim 1; likewise for any dim). index has t's ndim.
Tensor gather(const Tensor& t, int dim, const Tensor& index);
// t[i][index[i][j]] += src[i][j] (dim 1; likewise for any dim). Returns t.
Tensor& scatter_add_(Tensor& t, int dim, const Tensor& index, const Tensor& src);
Tensor scatter_add(const Tensor& t, int dim, const Tensor& index, const Tensor& src);

// Joined along an existing dim (cat) or a new one (stack). REQUIRES: the
// other dims match, one dtype and device.
Tensor cat(const std::vector<Tensor>& tensors, int dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int dim = 0);
// Views of consecutive pieces of `split_size` along dim (the last may be smaller).
std::vector<Tensor> split(const Tensor& t, int64_t split_size, int dim = 0);
// Views of pieces of the given sizes. REQUIRES: the sizes sum to t.size(dim).
std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int dim = 0);
// `chunks` views of near-equal size, as torch.chunk (fewer when the size is small).
std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int dim = 0);

}  // namespace spmd::ops
