// Indexing kernels (kernels/indexing.h). All four ops are one loop: walk the
// elements of the "iteration" tensor (out for the selects, src for the adds),
// look up the index for the element, and move one element from a source
// offset to a destination offset, one of which has its `dim` coordinate
// replaced by the index. Selecting copies raw words of the element's size;
// adding uses the atomicAdd of the dtype.
#include "kernels/device.cuh"
#include "kernels/indexing.h"

namespace spmd::kernels {
namespace {

struct IndexParams {
  int ndim, dim;
  int64_t sizes[kMaxDims];  // the iteration shape
  int64_t dst_strides[kMaxDims];
  int64_t src_strides[kMaxDims];
  int64_t index_strides[kMaxDims];  // per iteration dim (select/add: only `dim` is nonzero)
  bool dst_indexed;                 // the index replaces dst's coordinate (adds), else src's
  int64_t indexed_size;             // the size of the indexed tensor along dim
  const void* index;
  ScalarType index_dtype;
  int64_t numel;
};

struct Copy {};
struct Add {};

template <class T>
__device__ __forceinline__ void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else {
    atomicAdd(p, v);
  }
}

template <class T, class Op>
__global__ void index_kernel(IndexParams p, T* dst, const T* src) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.numel; i += stride) {
    int64_t rest = i, coord[kMaxDims], index_off = 0;
    for (int d = p.ndim - 1; d >= 0; --d) {
      coord[d] = rest % p.sizes[d];
      rest /= p.sizes[d];
      index_off += coord[d] * p.index_strides[d];
    }
    const int64_t idx = load_as<int64_t>(p.index, p.index_dtype, index_off);
    if (idx < 0 || idx >= p.indexed_size) continue;  // the range check reports it
    int64_t d_off = 0, s_off = 0;
    for (int d = 0; d < p.ndim; ++d) {
      const bool here = d == p.dim;
      d_off += (here && p.dst_indexed ? idx : coord[d]) * p.dst_strides[d];
      s_off += (here && !p.dst_indexed ? idx : coord[d]) * p.src_strides[d];
    }
    if constexpr (std::is_same_v<Op, Copy>) {
      dst[d_off] = src[s_off];
    } else {
      atomic_add(dst + d_off, src[s_off]);
    }
  }
}

template <class Word>
void launch_copy(const IndexParams& p, void* dst, const void* src, Stream stream) {
  index_kernel<Word, Copy><<<grid_for(p.numel, 256), 256, 0, stream>>>(
      p, static_cast<Word*>(dst), static_cast<const Word*>(src));
}

template <class T>
void launch_add(const IndexParams& p, void* dst, const void* src, Stream stream) {
  index_kernel<T, Add><<<grid_for(p.numel, 256), 256, 0, stream>>>(p, static_cast<T*>(dst),
                                                                   static_cast<const T*>(src));
}

// Moves elements from `src` to `dst`, iterating over `iter`'s shape.
void run(const TensorArg& iter, int dim, const TensorArg& index, bool per_element_index,
         const TensorArg& dst, const TensorArg& src, bool add, int64_t indexed_size,
         Stream stream) {
  SPMD_CHECK(dst.dtype == src.dtype, "indexing: source and destination dtypes differ");
  IndexParams p{};
  p.ndim = iter.ndim;
  p.dim = dim;
  for (int d = 0; d < iter.ndim; ++d) {
    p.sizes[d] = iter.sizes[d];
    p.dst_strides[d] = dst.strides[d];
    p.src_strides[d] = src.strides[d];
    p.index_strides[d] = per_element_index ? index.strides[d] : (d == dim ? index.strides[0] : 0);
  }
  p.dst_indexed = add;
  p.indexed_size = indexed_size;
  p.index = index.data;
  p.index_dtype = index.dtype;
  p.numel = iter.numel();
  if (p.numel == 0) return;
  if (!add) {
    switch (scalar_size(dst.dtype)) {
      case 1:
        launch_copy<uint8_t>(p, dst.data, src.data, stream);
        break;
      case 2:
        launch_copy<uint16_t>(p, dst.data, src.data, stream);
        break;
      case 4:
        launch_copy<uint32_t>(p, dst.data, src.data, stream);
        break;
      default:
        launch_copy<uint64_t>(p, dst.data, src.data, stream);
    }
  } else {
    switch (dst.dtype) {
      case ScalarType::kF32:
        launch_add<float>(p, dst.data, src.data, stream);
        break;
      case ScalarType::kF64:
        launch_add<double>(p, dst.data, src.data, stream);
        break;
      case ScalarType::kBF16:
        launch_add<bf16>(p, dst.data, src.data, stream);
        break;
      case ScalarType::kF16:
        launch_add<f16>(p, dst.data, src.data, stream);
        break;
      case ScalarType::kI32:
        launch_add<int>(p, dst.data, src.data, stream);
        break;
      case ScalarType::kI64:
        launch_add<int64_t>(p, dst.data, src.data, stream);
        break;
      default:
        SPMD_THROW(InvalidArgument, "index_add/scatter_add: no atomic add for ",
                   scalar_name(dst.dtype), " on CUDA");
    }
  }
  SPMD_CUDA_CHECK_LAUNCH();
}

__global__ void out_of_range_kernel(Offsets<1> off, int64_t n, const void* index, ScalarType dtype,
                                    int64_t size, bool has_ignore, int64_t ignore,
                                    unsigned long long* first_bad) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t o[1];
    off.compute<int64_t>(i, o);
    const int64_t v = load_as<int64_t>(index, dtype, o[0]);
    if ((v < 0 || v >= size) && !(has_ignore && v == ignore)) atomicMin(first_bad, i);
  }
}

// One thread: when the search found a bad element and the record is free,
// claims it and writes the check's id, the position and the value there.
// The id goes last, after a fence, so a host that sees it sees the rest.
__global__ void report_kernel(TensorArg index, const unsigned long long* first_bad, int64_t check,
                              int* claim, IndexRangeError* record) {
  const unsigned long long bad = *first_bad;
  if (bad == ~0ull || atomicCAS(claim, 0, 1) != 0) return;
  int64_t rest = int64_t(bad), offset = 0;  // the element's offset from its row-major position
  for (int d = index.ndim - 1; d >= 0; --d) {
    offset += (rest % index.sizes[d]) * index.strides[d];
    rest /= index.sizes[d];
  }
  volatile IndexRangeError* r = record;
  r->position = int64_t(bad);
  r->value = load_as<int64_t>(index.data, index.dtype, offset);
  __threadfence_system();
  r->check = check;
}

}  // namespace

void index_select(const TensorArg& x, int dim, const TensorArg& index, const TensorArg& out,
                  Stream stream) {
  run(out, dim, index, false, out, x, false, x.sizes[dim], stream);
}

void index_add(const TensorArg& out, int dim, const TensorArg& index, const TensorArg& src,
               Stream stream) {
  run(src, dim, index, false, out, src, true, out.sizes[dim], stream);
}

void gather(const TensorArg& x, int dim, const TensorArg& index, const TensorArg& out,
            Stream stream) {
  run(out, dim, index, true, out, x, false, x.sizes[dim], stream);
}

void scatter_add(const TensorArg& out, int dim, const TensorArg& index, const TensorArg& src,
                 Stream stream) {
  run(index, dim, index, true, out, src, true, out.sizes[dim], stream);
}

void check_index_range(const TensorArg& index, int64_t size, bool has_ignore, int64_t ignore,
                       int64_t check, int* claim, IndexRangeError* record, Scratch& scratch,
                       Stream stream) {
  SPMD_CHECK(index.dtype == ScalarType::kI64 || index.dtype == ScalarType::kI32,
             "expected an i64 or i32 index tensor, got ", scalar_name(index.dtype));
  const int64_t n = index.numel();
  if (n == 0) return;
  auto* first_bad = static_cast<unsigned long long*>(scratch.allocate(sizeof(unsigned long long)));
  SPMD_CUDA_CHECK(cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned long long), stream));
  const TensorArg* ops[1] = {&index};
  out_of_range_kernel<<<grid_for(n, 256), 256, 0, stream>>>(
      collapse_dims<1>(ops), n, index.data, index.dtype, size, has_ignore, ignore, first_bad);
  SPMD_CUDA_CHECK_LAUNCH();
  report_kernel<<<1, 1, 0, stream>>>(index, first_bad, check, claim, record);
  SPMD_CUDA_CHECK_LAUNCH();
}

}  // namespace spmd::kernels
