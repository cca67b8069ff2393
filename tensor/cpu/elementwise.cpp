// Elementwise arithmetic on the CPU: unary ops, and binary ops of two tensors
// or of a tensor and a scalar.
//
// Floating types run block kernels written as Eigen array expressions, which
// Eigen vectorizes (exp, tanh, erf and the logistic included). A row is cut
// into blocks of up to kBlock elements; a block is read in place when it is
// dense and already of the compute type, and otherwise gathered (and, for
// bf16/f16, converted to f32) into a stack buffer first. Integer arithmetic,
// comparisons and logical ops take the scalar path (scalar_ops.cpp).
//
// The same bits under every capability (capability.h). Eigen's loops write
// a scalar head up to the first address aligned for its packets, whole
// packets, then a scalar tail, and the scalar elements go through libm
// (std::exp) where the others take Eigen's vector code; where the head and
// tail end depends on the packet width. So a kernel only ever sees whole
// 64-byte vectors starting on a 64-byte boundary: the block's own memory
// when it is dense, aligned and whole, else a buffer padded with ones (a
// value every op is defined at). And where Eigen's packet code itself
// differs by ISA, the kernels avoid it: exp takes Eigen's generic algorithm
// (Eigen 3.4 gives AVX-512 an older one of its own), sqrt and rsqrt the
// exact instructions (Eigen's fast-math ones refine an approximation the
// ISAs compute differently), f64 pow libm's.
//
// Compiled once per CPU capability (kernels.h): these are KernelBackend's methods.
#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <unsupported/Eigen/SpecialFunctions>

#include "tensor/cpu/eigen_maps.h"
#include "tensor/cpu/float_blocks.h"
#include "tensor/cpu/kernels.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/scalar_ops.h"

namespace spmd::cpu::SPMD_CPU_CAP {
namespace {

// exp through Eigen's generic packet algorithm (pexp_float, pexp_double),
// whatever the ISA. Only whole packets reach it, so the scalar operator()
// exists for Eigen's sake alone.
struct GenericExp {
  template <class C>
  C operator()(const C& x) const {
    return std::exp(x);
  }
  template <class Packet>
  Packet packetOp(const Packet& x) const {
    if constexpr (std::is_same_v<typename Eigen::internal::unpacket_traits<Packet>::type, float>)
      return Eigen::internal::pexp_float(x);
    else
      return Eigen::internal::pexp_double(x);
  }
};

}  // namespace
}  // namespace spmd::cpu::SPMD_CPU_CAP

template <>
struct Eigen::internal::functor_traits<spmd::cpu::SPMD_CPU_CAP::GenericExp> {
  enum { Cost = 20, PacketAccess = true };
};

namespace spmd::cpu::SPMD_CPU_CAP {
namespace {

// y = sqrt(x) or 1 / sqrt(x), correctly rounded: a loop GCC turns into the
// vector sqrt and divide instructions.
template <class C>
void sqrt_block(const C* x, C* y, int64_t n, bool reciprocal) {
  if (reciprocal) {
    for (int64_t i = 0; i < n; ++i) y[i] = C(1) / std::sqrt(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(x[i]);
  }
}

template <class T>
constexpr bool is_float_v =
    std::is_floating_point_v<T> || std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>;

}  // namespace

// --- Floating-point block kernels (C is float or double; float_blocks.h) -----

template <class C>
void unary_block(UnaryOp op, const C* px, C* py, int64_t n) {
  const ConstArrayMap<C> x(px, n);
  ArrayMap<C> y(py, n);
  const C kSqrt2OverPi = C(0.7978845608028654), kInvSqrt2 = C(0.7071067811865476);
  switch (op) {
    case UnaryOp::kNeg:
      y = -x;
      break;
    case UnaryOp::kAbs:
      y = x.abs();
      break;
    case UnaryOp::kExp:
      y = x.unaryExpr(GenericExp());
      break;
    case UnaryOp::kLog:
      y = x.log();
      break;
    case UnaryOp::kSqrt:
      return sqrt_block(px, py, n, false);
    case UnaryOp::kRsqrt:
      return sqrt_block(px, py, n, true);
    case UnaryOp::kTanh:
      y = x.tanh();
      break;
    case UnaryOp::kSigmoid:
      y = x.logistic();
      break;
    case UnaryOp::kRelu:
      y = (x < C(0)).select(C(0), x);
      break;  // NaN stays NaN
    case UnaryOp::kGeluTanh:
      y = C(0.5) * x * (C(1) + (kSqrt2OverPi * (x + C(0.044715) * x.cube())).tanh());
      break;
    case UnaryOp::kGeluErf:
      y = C(0.5) * x * (C(1) + (x * kInvSqrt2).erf());
      break;
    case UnaryOp::kSilu:
      y = x * x.logistic();
      break;
    case UnaryOp::kSin:
      y = x.sin();
      break;
    case UnaryOp::kCos:
      y = x.cos();
      break;
    case UnaryOp::kSquare:
      y = x.square();
      break;
    case UnaryOp::kReciprocal:
      y = x.inverse();
      break;
    case UnaryOp::kSign:
      y = x.sign();
      break;
    case UnaryOp::kLogicalNot:
      break;  // bool output: handled by the scalar path
  }
}

// out = a op b; x is the forward input of an activation backward, y its output.
template <class C>
void binary_block(BinaryOp op, const C* pa, const C* pb, C* po, int64_t n) {
  const ConstArrayMap<C> a(pa, n), b(pb, n);
  ArrayMap<C> o(po, n);
  const C kSqrt2OverPi = C(0.7978845608028654), kInvSqrt2 = C(0.7071067811865476);
  const C kInvSqrt2Pi = C(0.3989422804014327), kCubic = C(0.044715);
  alignas(64) C t[kBlock];  // a temporary the backward formulas use twice
  ArrayMap<C> tmp(t, n);
  switch (op) {
    case BinaryOp::kAdd:
      o = a + b;
      break;
    case BinaryOp::kSub:
      o = a - b;
      break;
    case BinaryOp::kMul:
      o = a * b;
      break;
    case BinaryOp::kDiv:
      o = a / b;
      break;
    case BinaryOp::kPow:  // f64 through libm: Eigen's vector pow for doubles rounds by ISA
      if constexpr (std::is_same_v<C, double>) {
        for (int64_t i = 0; i < n; ++i) po[i] = std::pow(pa[i], pb[i]);
      } else {
        o = a.pow(b);
      }
      break;
    case BinaryOp::kMaximum:
      o = (a > b || a != a).select(a, b);
      break;  // NaN propagates
    case BinaryOp::kMinimum:
      o = (a < b || a != a).select(a, b);
      break;
    case BinaryOp::kReluBackward:
      o = (b > C(0)).select(a, C(0));
      break;
    case BinaryOp::kGeluTanhBackward:  // d/dx x/2 (1 + tanh u), u = k (x + c x^3)
      tmp = (kSqrt2OverPi * (b + kCubic * b.cube())).tanh();
      o = a * (C(0.5) * (C(1) + tmp) + C(0.5) * b * (C(1) - tmp.square()) * kSqrt2OverPi *
                                           (C(1) + C(3) * kCubic * b.square()));
      break;
    case BinaryOp::kGeluErfBackward:  // Phi(x) + x phi(x)
      o = a * (C(0.5) * (C(1) + (b * kInvSqrt2).erf()) +
               b * kInvSqrt2Pi * (C(-0.5) * b.square()).unaryExpr(GenericExp()));
      break;
    case BinaryOp::kSiluBackward:  // s (1 + x (1 - s)), s = sigmoid(x)
      tmp = b.logistic();
      o = a * tmp * (C(1) + b * (C(1) - tmp));
      break;
    case BinaryOp::kSigmoidBackward:
      o = a * b * (C(1) - b);
      break;
    case BinaryOp::kTanhBackward:
      o = a * (C(1) - b.square());
      break;
    default:
      break;  // comparisons and logical ops: the scalar path
  }
}

namespace {

bool is_costly(UnaryOp op) {
  return !(op == UnaryOp::kNeg || op == UnaryOp::kAbs || op == UnaryOp::kRelu ||
           op == UnaryOp::kSquare || op == UnaryOp::kSign || op == UnaryOp::kLogicalNot);
}
bool is_costly(BinaryOp op) { return op == BinaryOp::kPow || op >= BinaryOp::kReluBackward; }

// --- Moving blocks in and out of the compute type ----------------------------

// m elements of T at p (byte stride s) as the compute type, padded to
// whole vectors: read in place when they already are dense elements of it
// and whole (loads need no alignment), else converted into buf.
template <class T, class C = compute_t<T>>
const C* load_block(const char* p, int64_t s, int64_t m, C* buf) {
  if constexpr (std::is_same_v<T, C>) {
    if (s == int64_t(sizeof(T)) && m == whole_vectors<C>(m)) return reinterpret_cast<const C*>(p);
  }
  for (int64_t j = 0; j < m; ++j) buf[j] = C(*reinterpret_cast<const T*>(p + j * s));
  std::fill(buf + m, buf + whole_vectors<C>(m), C(1));
  return buf;
}
// Where a kernel should write the m elements bound for p: p itself when
// dense, whole and 64-byte aligned, else buf.
template <class T, class C = compute_t<T>>
C* out_block(char* p, int64_t s, int64_t m, C* buf) {
  if constexpr (std::is_same_v<T, C>) {
    if (s == int64_t(sizeof(T)) && m == whole_vectors<C>(m) &&
        reinterpret_cast<uintptr_t>(p) % kVectorBytes == 0)
      return reinterpret_cast<C*>(p);
  }
  return buf;
}
template <class T, class C = compute_t<T>>
void store_block(char* p, int64_t s, int64_t m, const C* src) {
  if (static_cast<const void*>(src) == p) return;
  for (int64_t j = 0; j < m; ++j) *reinterpret_cast<T*>(p + j * s) = T(src[j]);
}

// An input of a binary row: strided memory of type T, or a constant scalar.
template <class T>
struct Source {
  const char* p = nullptr;
  int64_t stride = 0;
  bool constant = false;
  compute_t<T> value{};
};

template <class T>
void unary_float_row(UnaryOp op, char* const* p, const int64_t* s, int64_t n) {
  using C = compute_t<T>;
  alignas(64) C xbuf[kBlock], ybuf[kBlock];
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    const C* x = load_block<T>(p[1] + i * s[1], s[1], m, xbuf);
    C* y = out_block<T>(p[0] + i * s[0], s[0], m, ybuf);
    unary_block<C>(op, x, y, whole_vectors<C>(m));
    store_block<T>(p[0] + i * s[0], s[0], m, y);
  }
}

template <class T>
void binary_float_row(BinaryOp op, const Source<T>& a, const Source<T>& b, char* out,
                      int64_t out_stride, int64_t n) {
  using C = compute_t<T>;
  alignas(64) C abuf[kBlock], bbuf[kBlock], obuf[kBlock];
  if (a.constant) std::fill_n(abuf, kBlock, a.value);
  if (b.constant) std::fill_n(bbuf, kBlock, b.value);
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    const C* x = a.constant ? abuf : load_block<T>(a.p + i * a.stride, a.stride, m, abuf);
    const C* y = b.constant ? bbuf : load_block<T>(b.p + i * b.stride, b.stride, m, bbuf);
    C* o = out_block<T>(out + i * out_stride, out_stride, m, obuf);
    binary_block<C>(op, x, y, o, whole_vectors<C>(m));
    store_block<T>(out + i * out_stride, out_stride, m, o);
  }
}

// --- Scalar paths: integers, comparisons, logical ops ------------------------

}  // namespace

void KernelBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  const StridedLoop<2> loop = make_loop<2>({&out, &x});
  visit_dtype(x.dtype(), [&]<class T>() {
    if (op == UnaryOp::kLogicalNot) {
      scalar_unary(op, loop, x.dtype());
    } else if constexpr (is_float_v<T>) {
      for_each_row(
          loop, is_costly(op) ? kCostlyGrain : kGrain,
          [op](char* const* p, const int64_t* s, int64_t n) { unary_float_row<T>(op, p, s, n); });
    } else {
      scalar_unary(op, loop, x.dtype());
    }
  });
}

void KernelBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const StridedLoop<3> loop = make_loop<3>({&out, &a, &b});
  visit_dtype(a.dtype(), [&]<class T>() {
    if constexpr (is_float_v<T>) {
      if (!produces_bool(op)) {
        for_each_row(
            loop, is_costly(op) ? kCostlyGrain : kGrain,
            [op](char* const* p, const int64_t* s, int64_t n) {
              binary_float_row<T>(op, Source<T>{p[1], s[1]}, Source<T>{p[2], s[2]}, p[0], s[0], n);
            });
        return;
      }
    }
    scalar_binary(op, loop, a.dtype());
  });
}

void KernelBackend::binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out,
                                  bool scalar_first) {
  const StridedLoop<2> loop = make_loop<2>({&out, &a});
  visit_dtype(a.dtype(), [&]<class T>() {
    if constexpr (is_float_v<T>) {
      if (!produces_bool(op)) {
        const Source<T> constant{nullptr, 0, true, compute_t<T>(s)};
        for_each_row(loop, is_costly(op) ? kCostlyGrain : kGrain,
                     [&](char* const* p, const int64_t* st, int64_t n) {
                       const Source<T> x{p[1], st[1]};
                       binary_float_row<T>(op, scalar_first ? constant : x,
                                           scalar_first ? x : constant, p[0], st[0], n);
                     });
        return;
      }
    }
    const T value = convert_to<T>(s);
    scalar_binary(op, with_constant(loop, &value, scalar_first), a.dtype());
  });
}

template void unary_block<float>(UnaryOp, const float*, float*, int64_t);
template void unary_block<double>(UnaryOp, const double*, double*, int64_t);
template void binary_block<float>(BinaryOp, const float*, const float*, float*, int64_t);
template void binary_block<double>(BinaryOp, const double*, const double*, double*, int64_t);

}  // namespace spmd::cpu::SPMD_CPU_CAP
