// Elementwise kernels (kernels/elementwise.h). Every map (fill, copy, unary,
// binary, with a scalar, where, masked_fill) is one `MapOp` evaluated per
// element by `apply`, so there are only two kernel templates: a contiguous one
// per storage type that moves 16 bytes per access, and a strided one per
// compute type that loads and stores any dtype. The op is a launch argument
// every thread shares: its switch costs no divergence, and the build compiles
// a handful of kernels rather than one per (op, dtype) pair.
#include <cmath>
#include <cstring>

#include "kernels/device.cuh"
#include "kernels/elementwise.h"
#include "kernels/math.cuh"

namespace spmd::kernels {
namespace {

enum class Kind : uint8_t {
  kCopy,
  kFill,
  kUnary,
  kBinary,
  kScalarRight,
  kScalarLeft,
  kWhere,
  kMaskedFill,
};

struct MapOp {
  Kind kind;
  uint8_t op;     // a UnaryOp or BinaryOp
  double scalar;  // the fill value, the scalar operand, the masked_fill value
};

// One element of the map. x, y, z are the inputs in order (where: cond, a, b;
// masked_fill: x, mask).
template <class C>
__device__ __forceinline__ C apply(const MapOp& m, C x, C y, C z) {
  switch (m.kind) {
    case Kind::kCopy:
      return x;
    case Kind::kFill:
      return static_cast<C>(m.scalar);
    case Kind::kUnary:
      return unary_op<C>(UnaryOp(m.op), x);
    case Kind::kBinary:
      return binary_op<C>(BinaryOp(m.op), x, y);
    case Kind::kScalarRight:
      return binary_op<C>(BinaryOp(m.op), x, static_cast<C>(m.scalar));
    case Kind::kScalarLeft:
      return binary_op<C>(BinaryOp(m.op), static_cast<C>(m.scalar), x);
    case Kind::kWhere:
      return x != C(0) ? y : z;
    case Kind::kMaskedFill:
      return y != C(0) ? static_cast<C>(m.scalar) : x;
  }
  return x;
}

// --- Contiguous operands of one dtype: 16-byte vectors ----------------------------

template <class T>
struct alignas(16) Vec {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

template <class T>
__global__ void contiguous_map(T* out, const T* a, const T* b, int64_t n, MapOp m) {
  using C = compute_t<T>;
  using V = Vec<T>;
  constexpr int kV = V::kSize;
  const int64_t nvec = n / kV;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < nvec; i += stride) {
    V va{}, vb{}, vo;
    if (a) va = reinterpret_cast<const V*>(a)[i];
    if (b) vb = reinterpret_cast<const V*>(b)[i];
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      vo.v[k] = convert<T>(apply<C>(m, convert<C>(va.v[k]), convert<C>(vb.v[k]), C(0)));
    }
    reinterpret_cast<V*>(out)[i] = vo;
  }
  for (int64_t i = nvec * kV + first; i < n; i += stride) {  // the tail
    const C x = a ? convert<C>(a[i]) : C(0), y = b ? convert<C>(b[i]) : C(0);
    out[i] = convert<T>(apply<C>(m, x, y, C(0)));
  }
}

template <class T>
void launch_contiguous(const MapOp& m, const TensorArg& out, const TensorArg* a, const TensorArg* b,
                       Stream stream) {
  const int64_t n = out.numel();
  const int threads = 256;
  const unsigned blocks = grid_for((n + Vec<T>::kSize - 1) / Vec<T>::kSize, threads);
  contiguous_map<T><<<blocks, threads, 0, stream>>>(
      static_cast<T*>(out.data), a ? static_cast<const T*>(a->data) : nullptr,
      b ? static_cast<const T*>(b->data) : nullptr, n, m);
  SPMD_CUDA_CHECK_LAUNCH();
}

// --- Any strides, any dtypes ----------------------------------------------------------

struct StridedParams {
  Offsets<4> off;  // operand 0 is the output
  void* data[4];
  ScalarType dtype[4];
  int nin;
  int64_t numel;
};

template <class C, class I>
__global__ void strided_map(StridedParams p, MapOp m) {
  const I stride = I(gridDim.x) * blockDim.x;
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < I(p.numel); i += stride) {
    int64_t o[4];
    p.off.compute<I>(i, o);
    C in[3] = {C(0), C(0), C(0)};
#pragma unroll
    for (int k = 0; k < 3; ++k) {
      if (k < p.nin) in[k] = load_as<C>(p.data[k + 1], p.dtype[k + 1], o[k + 1]);
    }
    store_as<C>(p.data[0], p.dtype[0], o[0], apply<C>(m, in[0], in[1], in[2]));
  }
}

enum class Compute { kFloat, kDouble, kInt };

// The compute type of a map over these dtypes: f64 if any is f64, else f32 if
// any is floating, else int64.
Compute compute_of(std::initializer_list<ScalarType> types) {
  bool any_float = false;
  for (ScalarType t : types) {
    if (t == ScalarType::kF64) return Compute::kDouble;
    any_float = any_float || is_floating(t);
  }
  return any_float ? Compute::kFloat : Compute::kInt;
}

template <class C>
void launch_strided_as(const StridedParams& p, const MapOp& m, Stream stream) {
  const int threads = 256;
  const unsigned blocks = grid_for(p.numel, threads);
  if (p.numel < (int64_t(1) << 31)) {
    strided_map<C, uint32_t><<<blocks, threads, 0, stream>>>(p, m);
  } else {
    strided_map<C, uint64_t><<<blocks, threads, 0, stream>>>(p, m);
  }
  SPMD_CUDA_CHECK_LAUNCH();
}

void launch_strided(const MapOp& m, Compute compute, const TensorArg& out, const TensorArg* in0,
                    const TensorArg* in1, const TensorArg* in2, Stream stream) {
  StridedParams p{};
  const TensorArg* ops[4] = {&out, in0, in1, in2};
  p.off = collapse_dims<4>(ops);
  p.nin = 0;
  for (int k = 0; k < 4; ++k) {
    if (!ops[k]) continue;
    p.data[k] = ops[k]->data;
    p.dtype[k] = ops[k]->dtype;
    if (k > 0) p.nin = k;
  }
  p.numel = out.numel();
  switch (compute) {
    case Compute::kFloat:
      launch_strided_as<float>(p, m, stream);
      break;
    case Compute::kDouble:
      launch_strided_as<double>(p, m, stream);
      break;
    case Compute::kInt:
      launch_strided_as<int64_t>(p, m, stream);
      break;
  }
}

bool aligned16(const TensorArg* t) {
  return !t || (reinterpret_cast<uintptr_t>(t->data) % 16 == 0);
}

// True when the vectorised kernel can run: every operand contiguous, one dtype.
bool contiguous_case(const TensorArg& out, const TensorArg* a, const TensorArg* b) {
  for (const TensorArg* t : {&out, a, b}) {
    if (!t) continue;
    if (!t->is_contiguous() || t->dtype != out.dtype || !aligned16(t)) return false;
  }
  return out.dtype != ScalarType::kU8 && out.dtype != ScalarType::kBool;
}

// Runs the map: vectorised when it can, strided otherwise.
void run_map(const MapOp& m, Compute compute, const TensorArg& out, const TensorArg* a,
             const TensorArg* b, Stream stream) {
  if (out.numel() == 0) return;
  if (contiguous_case(out, a, b)) {
    switch (out.dtype) {
      case ScalarType::kF32:
        return launch_contiguous<float>(m, out, a, b, stream);
      case ScalarType::kF64:
        return launch_contiguous<double>(m, out, a, b, stream);
      case ScalarType::kBF16:
        return launch_contiguous<bf16>(m, out, a, b, stream);
      case ScalarType::kF16:
        return launch_contiguous<f16>(m, out, a, b, stream);
      case ScalarType::kI32:
        return launch_contiguous<int32_t>(m, out, a, b, stream);
      case ScalarType::kI64:
        return launch_contiguous<int64_t>(m, out, a, b, stream);
      default:
        break;
    }
  }
  launch_strided(m, compute, out, a, b, nullptr, stream);
}

bool is_comparison(BinaryOp op) { return op >= BinaryOp::kEq && op <= BinaryOp::kLogicalOr; }

}  // namespace

// --- The launch functions of elementwise.h ------------------------------------------

void fill(const TensorArg& out, double value, Stream stream) {
  const int64_t n = out.numel();
  if (n == 0) return;
  // A memset when every byte is the same: zero (all-zero bits in every dtype)
  // or any value of a one-byte dtype.
  const bool zero = value == 0 && !std::signbit(value);
  const bool one_byte = out.dtype == ScalarType::kU8 || out.dtype == ScalarType::kBool;
  if (out.is_contiguous() && (zero || one_byte)) {
    int byte = 0;
    if (out.dtype == ScalarType::kBool)
      byte = value != 0;
    else if (one_byte)
      byte = uint8_t(int64_t(value));
    SPMD_CUDA_CHECK(cudaMemsetAsync(out.data, byte, size_t(n) * scalar_size(out.dtype), stream));
    return;
  }
  run_map({Kind::kFill, 0, value}, compute_of({out.dtype}), out, nullptr, nullptr, stream);
}

void copy(const TensorArg& src, const TensorArg& out, Stream stream) {
  if (out.numel() == 0) return;
  if (src.dtype == out.dtype && src.is_contiguous() && out.is_contiguous()) {
    if (src.data != out.data) {
      SPMD_CUDA_CHECK(cudaMemcpyAsync(out.data, src.data,
                                      size_t(out.numel()) * scalar_size(out.dtype),
                                      cudaMemcpyDeviceToDevice, stream));
    }
    return;
  }
  launch_strided({Kind::kCopy, 0, 0}, compute_of({src.dtype, out.dtype}), out, &src, nullptr,
                 nullptr, stream);
}

void unary(UnaryOp op, const TensorArg& x, const TensorArg& out, Stream stream) {
  run_map({Kind::kUnary, uint8_t(op), 0}, compute_of({x.dtype, out.dtype}), out, &x, nullptr,
          stream);
}

void binary(BinaryOp op, const TensorArg& a, const TensorArg& b, const TensorArg& out,
            Stream stream) {
  // Comparisons compute in their inputs' type, not their bool output's.
  const Compute c = is_comparison(op) ? compute_of({a.dtype, b.dtype})
                                      : compute_of({a.dtype, b.dtype, out.dtype});
  run_map({Kind::kBinary, uint8_t(op), 0}, c, out, &a, &b, stream);
}

void binary_scalar(BinaryOp op, const TensorArg& a, double s, bool scalar_first,
                   const TensorArg& out, Stream stream) {
  Compute c = is_comparison(op) ? compute_of({a.dtype}) : compute_of({a.dtype, out.dtype});
  if (c == Compute::kInt && s != double(int64_t(s))) c = Compute::kDouble;  // int < 0.5
  run_map({scalar_first ? Kind::kScalarLeft : Kind::kScalarRight, uint8_t(op), s}, c, out, &a,
          nullptr, stream);
}

void where(const TensorArg& cond, const TensorArg& a, const TensorArg& b, const TensorArg& out,
           Stream stream) {
  if (out.numel() == 0) return;
  launch_strided({Kind::kWhere, 0, 0}, compute_of({a.dtype, b.dtype, out.dtype}), out, &cond, &a,
                 &b, stream);
}

void masked_fill(const TensorArg& x, const TensorArg& mask, double value, const TensorArg& out,
                 Stream stream) {
  if (out.numel() == 0) return;
  launch_strided({Kind::kMaskedFill, 0, value}, compute_of({x.dtype, out.dtype}), out, &x, &mask,
                 nullptr, stream);
}

// --- arange and triangle: maps that need the element's coordinates --------------------

namespace {

__global__ void arange_kernel(void* out, ScalarType dtype, int64_t n, double start, double step) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    store_as<double>(out, dtype, i, start + double(i) * step);
  }
}

// Elements are moved as raw words of their size: the kept ones are copied,
// the others zeroed (0 is all-zero bits in every dtype).
template <class Word>
__global__ void triangle_kernel(Offsets<2> off, Word* out, const Word* x, int64_t n,
                                int64_t diagonal, bool upper) {
  const int64_t rows = off.sizes[off.ndim - 2], cols = off.sizes[off.ndim - 1];
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t col = i % cols, row = (i / cols) % rows;
    int64_t o[2];
    off.compute<int64_t>(i, o);
    const bool keep = upper ? (col - row >= diagonal) : (col - row <= diagonal);
    out[o[0]] = keep ? x[o[1]] : Word(0);
  }
}

}  // namespace

void arange(const TensorArg& out, double start, double step, Stream stream) {
  const int64_t n = out.numel();
  if (n == 0) return;
  arange_kernel<<<grid_for(n, 256), 256, 0, stream>>>(out.data, out.dtype, n, start, step);
  SPMD_CUDA_CHECK_LAUNCH();
}

void triangle(const TensorArg& x, int64_t diagonal, bool upper, const TensorArg& out,
              Stream stream) {
  SPMD_CHECK(out.ndim >= 2 && x.dtype == out.dtype, "triangle: expected >= 2 dims and one dtype");
  const int64_t n = out.numel();
  if (n == 0) return;
  // No merging of dims here: the kernel needs the last two as they are.
  Offsets<2> off{};
  off.ndim = out.ndim;
  for (int d = 0; d < out.ndim; ++d) {
    off.sizes[d] = out.sizes[d];
    off.strides[0][d] = out.strides[d];
    off.strides[1][d] = x.strides[d];
  }
  const unsigned blocks = grid_for(n, 256);
  switch (scalar_size(out.dtype)) {
    case 1:
      triangle_kernel<<<blocks, 256, 0, stream>>>(off, static_cast<uint8_t*>(out.data),
                                                  static_cast<const uint8_t*>(x.data), n, diagonal,
                                                  upper);
      break;
    case 2:
      triangle_kernel<<<blocks, 256, 0, stream>>>(off, static_cast<uint16_t*>(out.data),
                                                  static_cast<const uint16_t*>(x.data), n, diagonal,
                                                  upper);
      break;
    case 4:
      triangle_kernel<<<blocks, 256, 0, stream>>>(off, static_cast<uint32_t*>(out.data),
                                                  static_cast<const uint32_t*>(x.data), n, diagonal,
                                                  upper);
      break;
    default:
      triangle_kernel<<<blocks, 256, 0, stream>>>(off, static_cast<uint64_t*>(out.data),
                                                  static_cast<const uint64_t*>(x.data), n, diagonal,
                                                  upper);
  }
  SPMD_CUDA_CHECK_LAUNCH();
}

}  // namespace spmd::kernels
