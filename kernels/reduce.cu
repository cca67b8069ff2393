// Reductions (kernels/reduce.h). The host plans: it separates kept and
// reduced dims, merges each, picks the row or column kernel and a split of R
// across blocks; the kernels accumulate with four independent partial results
// per thread so that several loads are in flight.
#include <algorithm>
#include <cmath>

#include "kernels/device.cuh"
#include "kernels/math.cuh"
#include "kernels/reduce.h"

namespace spmd::kernels {
namespace {

struct ReduceParams {
  Offsets<2> kept;  // kept dims; strides[0] into x, strides[1] into out
  Offsets<1> red;   // reduced dims; strides into x
  int64_t M, R;
  const void* x;
  ScalarType x_dtype;
  void* out;  // the final output, or (split) partial[m * splits + j] of the accumulate type
  ScalarType out_dtype;
  ReduceOp op;
  int64_t splits;  // blocks sharing one output's R
  bool finalize;   // write the output (and divide a mean); else write partials
  int64_t count;   // the divisor of a mean
};

template <class A>
__device__ __forceinline__ A identity(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProd:
      return A(1);
    case ReduceOp::kMax:
      if constexpr (std::is_integral_v<A>)
        return A(INT64_MIN);
      else
        return A(-INFINITY);
    case ReduceOp::kMin:
      if constexpr (std::is_integral_v<A>)
        return A(INT64_MAX);
      else
        return A(INFINITY);
    default:
      return A(0);
  }
}

template <class A>
__device__ __forceinline__ A combine(ReduceOp op, A a, A b) {
  switch (op) {
    case ReduceOp::kMax:
      return max_nan(a, b);
    case ReduceOp::kMin:
      return min_nan(a, b);
    case ReduceOp::kProd:
      return a * b;
    default:
      return a + b;
  }
}

__device__ __forceinline__ int64_t reduced_offset(const ReduceParams& p, int64_t r) {
  if (p.red.ndim == 1) return r * p.red.strides[0][0];
  int64_t o[1];
  p.red.compute<int64_t>(r, o);
  return o[0];
}

// Accumulates x over reduced elements begin, begin+step, ... < end of the
// output whose x offset is `base`, four loads in flight.
template <class A>
__device__ __forceinline__ A accumulate(const ReduceParams& p, int64_t base, int64_t begin,
                                        int64_t end, int64_t step) {
  A acc[4] = {identity<A>(p.op), identity<A>(p.op), identity<A>(p.op), identity<A>(p.op)};
  int64_t r = begin;
  for (; r + 3 * step < end; r += 4 * step) {
    A v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      v[k] = load_as<A>(p.x, p.x_dtype, base + reduced_offset(p, r + k * step));
#pragma unroll
    for (int k = 0; k < 4; ++k) acc[k] = combine(p.op, acc[k], v[k]);
  }
  for (; r < end; r += step)
    acc[0] = combine(p.op, acc[0], load_as<A>(p.x, p.x_dtype, base + reduced_offset(p, r)));
  return combine(p.op, combine(p.op, acc[0], acc[1]), combine(p.op, acc[2], acc[3]));
}

template <class A>
__device__ __forceinline__ void write_result(const ReduceParams& p, int64_t m, int64_t out_off,
                                             A acc) {
  if (!p.finalize) {
    static_cast<A*>(p.out)[m * p.splits + blockIdx.y] = acc;
    return;
  }
  if (p.op == ReduceOp::kMean) acc = acc / static_cast<A>(p.count);
  store_as<A>(p.out, p.out_dtype, out_off, acc);
}

// Rows: blockDim (tx, ty); ty rows per block, tx threads per row.
template <class A>
__global__ void reduce_rows(ReduceParams p) {
  __shared__ A shared[32];
  const int64_t m = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const int64_t chunk = (p.R + p.splits - 1) / p.splits;
  const int64_t begin = blockIdx.y * chunk, end = min(p.R, begin + chunk);
  A acc = identity<A>(p.op);
  int64_t o[2] = {0, 0};
  if (m < p.M) {
    p.kept.compute<int64_t>(m, o);
    acc = accumulate<A>(p, o[0], begin + threadIdx.x, end, blockDim.x);
  }
  const ReduceOp op = p.op;
  acc = warp_reduce(acc, [op](A a, A b) { return combine(op, a, b); });
  if (blockDim.x > 32) {  // then ty == 1: combine the block's warps
    const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if ((threadIdx.x & 31) == 0) shared[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < nwarps; ++w) acc = combine(op, acc, shared[w]);
    }
  }
  if (threadIdx.x == 0 && m < p.M) write_result(p, m, o[1], acc);
}

// Columns: one thread per output.
template <class A>
__global__ void reduce_columns(ReduceParams p) {
  const int64_t m = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (m >= p.M) return;
  const int64_t chunk = (p.R + p.splits - 1) / p.splits;
  const int64_t begin = blockIdx.y * chunk, end = min(p.R, begin + chunk);
  int64_t o[2];
  p.kept.compute<int64_t>(m, o);
  write_result(p, m, o[1], accumulate<A>(p, o[0], begin, end, 1));
}

// --- Planning -------------------------------------------------------------------

template <class A>
ScalarType scalar_of() {
  if constexpr (std::is_same_v<A, float>)
    return ScalarType::kF32;
  else if constexpr (std::is_same_v<A, double>)
    return ScalarType::kF64;
  else
    return ScalarType::kI64;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Splits kept from reduced dims and merges each.
ReduceParams plan(ReduceOp op, const TensorArg& x, const TensorArg& out) {
  TensorArg kept_x{}, kept_out{}, red{};
  int order[kMaxDims], nred = 0;
  for (int d = 0; d < x.ndim; ++d) {
    if (x.sizes[d] == 1) continue;
    if (out.sizes[d] == 1) {
      order[nred++] = d;
    } else {
      kept_x.sizes[kept_x.ndim] = kept_out.sizes[kept_out.ndim] = x.sizes[d];
      kept_x.strides[kept_x.ndim++] = x.strides[d];
      kept_out.strides[kept_out.ndim++] = out.strides[d];
    }
  }
  // Reduced dims from the largest stride to the smallest, so they merge.
  for (int i = 1; i < nred; ++i) {  // insertion sort: at most 8 dims
    for (int j = i; j > 0 && std::abs(x.strides[order[j]]) > std::abs(x.strides[order[j - 1]]); --j)
      std::swap(order[j], order[j - 1]);
  }
  for (int i = 0; i < nred; ++i) {
    red.sizes[i] = x.sizes[order[i]];
    red.strides[i] = x.strides[order[i]];
  }
  red.ndim = nred;
  ReduceParams p{};
  const TensorArg* kept_ops[2] = {&kept_x, &kept_out};
  p.kept = collapse_dims<2>(kept_ops);
  const TensorArg* red_ops[1] = {&red};
  p.red = collapse_dims<1>(red_ops);
  p.M = kept_x.numel();
  p.R = red.numel();
  p.x = x.data;
  p.x_dtype = x.dtype;
  p.out = out.data;
  p.out_dtype = out.dtype;
  p.op = op;
  p.splits = 1;
  p.finalize = true;
  p.count = p.R;
  return p;
}

template <class A>
void launch_pass(ReduceParams p, bool rows, Stream stream) {
  if (rows) {
    const int tx = p.R >= 1024 ? 256 : 32, ty = 256 / tx;
    reduce_rows<A>
        <<<dim3(unsigned(ceil_div(p.M, ty)), unsigned(p.splits)), dim3(tx, ty), 0, stream>>>(p);
  } else {
    reduce_columns<A>
        <<<dim3(unsigned(ceil_div(p.M, 256)), unsigned(p.splits)), 256, 0, stream>>>(p);
  }
  SPMD_CUDA_CHECK_LAUNCH();
}

// How many blocks should share one output's R so that the launch fills the GPU.
int64_t choose_splits(const ReduceParams& p, bool rows) {
  const int64_t sms = multiprocessor_count();
  const int64_t blocks = rows ? ceil_div(p.M, p.R >= 1024 ? 1 : 8) : ceil_div(p.M, 256);
  const int64_t min_per_block = rows ? 8192 : 256;
  if (blocks >= 2 * sms || p.R < 2 * min_per_block) return 1;
  return std::max<int64_t>(
      1, std::min({ceil_div(8 * sms, blocks), p.R / min_per_block, int64_t(65535)}));
}

template <class A>
void reduce_as(ReduceParams p, Scratch& scratch, Stream stream) {
  // Rows when one output's elements lie closer together than neighbouring outputs.
  const int64_t red_inner = std::abs(p.red.strides[0][p.red.ndim - 1]);
  const int64_t kept_inner = std::abs(p.kept.strides[0][p.kept.ndim - 1]);
  const bool rows = p.R > 1 && (p.M == 1 || red_inner <= kept_inner);
  p.splits = choose_splits(p, rows);
  if (p.splits == 1) return launch_pass<A>(p, rows, stream);

  // Pass 1: partial[m][j]; pass 2: a row reduction of each m's partials.
  A* partial = static_cast<A*>(scratch.allocate(size_t(p.M * p.splits) * sizeof(A)));
  ReduceParams first = p;
  first.out = partial;
  first.finalize = false;
  launch_pass<A>(first, rows, stream);

  ReduceParams second = p;
  second.x = partial;
  second.x_dtype = scalar_of<A>();
  int64_t stride = p.splits;
  for (int d = p.kept.ndim - 1; d >= 0; --d) {
    second.kept.strides[0][d] = stride;
    stride *= p.kept.sizes[d];
  }
  second.red.ndim = 1;
  second.red.sizes[0] = p.splits;
  second.red.strides[0][0] = 1;
  second.R = p.splits;
  second.splits = 1;  // a mean's partials are sums; this pass divides by count = p.R
  launch_pass<A>(second, true, stream);
}

// --- argmax / argmin ------------------------------------------------------------

// True when (v, i) should replace (best, bi): larger (smaller), NaN first, then
// the lower index on ties.
template <class A>
__device__ __forceinline__ bool beats(bool is_max, A v, int64_t i, A best, int64_t bi) {
  if constexpr (!std::is_integral_v<A>) {
    const bool vn = v != v, bn = best != best;
    if (vn || bn) return vn && (!bn || i < bi);
  }
  if (v == best) return i < bi;
  return is_max ? v > best : v < best;
}

template <class A>
__global__ void arg_reduce_kernel(Offsets<2> kept, int64_t M, const void* x, ScalarType dtype,
                                  int64_t K, int64_t k_stride, int64_t* out, bool is_max) {
  const int64_t m = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (m >= M) return;  // whole warps leave together
  int64_t o[2];
  kept.compute<int64_t>(m, o);
  A best = load_as<A>(x, dtype, o[0]);
  int64_t bi = 0;
  for (int64_t k = lane; k < K; k += 32) {
    const A v = load_as<A>(x, dtype, o[0] + k * k_stride);
    if (beats(is_max, v, k, best, bi)) best = v, bi = k;
  }
  for (int off = 16; off > 0; off >>= 1) {
    const A v = __shfl_xor_sync(0xffffffffu, best, off);
    const int64_t i = __shfl_xor_sync(0xffffffffu, bi, off);
    if (beats(is_max, v, i, best, bi)) best = v, bi = i;
  }
  if (lane == 0) out[o[1]] = bi;
}

template <class A>
void arg_reduce_as(bool is_max, const TensorArg& x, int dim, const TensorArg& out, Stream stream) {
  TensorArg kept_x{}, kept_out{};
  for (int d = 0; d < x.ndim; ++d) {
    if (d == dim || x.sizes[d] == 1) continue;
    kept_x.sizes[kept_x.ndim] = kept_out.sizes[kept_out.ndim] = x.sizes[d];
    kept_x.strides[kept_x.ndim++] = x.strides[d];
    kept_out.strides[kept_out.ndim++] = out.strides[d];
  }
  const TensorArg* ops[2] = {&kept_x, &kept_out};
  const Offsets<2> kept = collapse_dims<2>(ops);
  const int64_t M = kept_x.numel();
  const int64_t K = x.ndim ? x.sizes[dim] : 1, k_stride = x.ndim ? x.strides[dim] : 0;
  arg_reduce_kernel<A><<<unsigned(ceil_div(M * 32, 256)), 256, 0, stream>>>(
      kept, M, x.data, x.dtype, K, k_stride, static_cast<int64_t*>(out.data), is_max);
  SPMD_CUDA_CHECK_LAUNCH();
}

}  // namespace

void reduce(ReduceOp op, const TensorArg& x, const TensorArg& out, Scratch& scratch,
            Stream stream) {
  if (out.numel() == 0) return;
  const ReduceParams p = plan(op, x, out);
  if (x.dtype == ScalarType::kF64) return reduce_as<double>(p, scratch, stream);
  if (is_floating(x.dtype)) return reduce_as<float>(p, scratch, stream);
  return reduce_as<int64_t>(p, scratch, stream);
}

void arg_reduce(bool is_max, const TensorArg& x, int dim, const TensorArg& out, Stream stream) {
  SPMD_CHECK(out.dtype == ScalarType::kI64, "arg_reduce: the output must be i64");
  SPMD_CHECK(x.ndim == 0 || x.sizes[dim] > 0, "arg_reduce: cannot reduce an empty dim");
  if (out.numel() == 0) return;
  if (x.dtype == ScalarType::kF64) return arg_reduce_as<double>(is_max, x, dim, out, stream);
  if (is_floating(x.dtype)) return arg_reduce_as<float>(is_max, x, dim, out, stream);
  return arg_reduce_as<int64_t>(is_max, x, dim, out, stream);
}

}  // namespace spmd::kernels
