// Elementwise arithmetic on the CPU: unary ops, and binary ops of two tensors
// or of a tensor and a scalar.
//
// Floating types run block kernels written as Eigen array expressions, which
// Eigen vectorizes (exp, tanh, erf and the logistic included). A row is cut
// into blocks of up to kBlock elements; a block is read in place when it is
// dense and already of the compute type, and otherwise gathered (and, for
// bf16/f16, converted to f32) into a stack buffer first. Integer arithmetic,
// comparisons and logical ops are plain scalar loops, which the compiler
// vectorizes when the row is dense.
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/loops.h"

namespace spmd::cpu {
namespace {

constexpr int64_t kBlock = 1024;
// The grain (see loops.h) of ops that cost tens of cycles per element.
constexpr int64_t kCostlyGrain = 4096;

template <class T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <class T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

template <class T>
constexpr bool is_float_v =
    std::is_floating_point_v<T> || std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>;

// --- Floating-point block kernels (C is float or double) --------------------

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
      y = x.exp();
      break;
    case UnaryOp::kLog:
      y = x.log();
      break;
    case UnaryOp::kSqrt:
      y = x.sqrt();
      break;
    case UnaryOp::kRsqrt:
      y = x.rsqrt();
      break;
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
    case BinaryOp::kPow:
      o = a.pow(b);
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
               b * kInvSqrt2Pi * (C(-0.5) * b.square()).exp());
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

bool is_costly(UnaryOp op) {
  return !(op == UnaryOp::kNeg || op == UnaryOp::kAbs || op == UnaryOp::kRelu ||
           op == UnaryOp::kSquare || op == UnaryOp::kSign || op == UnaryOp::kLogicalNot);
}
bool is_costly(BinaryOp op) { return op == BinaryOp::kPow || op >= BinaryOp::kReluBackward; }

// --- Moving blocks in and out of the compute type ----------------------------

// m elements of T at p (byte stride s) as the compute type: read in place
// when they already are dense elements of it, else converted into buf.
template <class T, class C = compute_t<T>>
const C* load_block(const char* p, int64_t s, int64_t m, C* buf) {
  if constexpr (std::is_same_v<T, C>) {
    if (s == int64_t(sizeof(T))) return reinterpret_cast<const C*>(p);
  }
  for (int64_t j = 0; j < m; ++j) buf[j] = C(*reinterpret_cast<const T*>(p + j * s));
  return buf;
}
// Where a kernel should write a block bound for p: p itself when dense, else buf.
template <class T, class C = compute_t<T>>
C* out_block(char* p, int64_t s, C* buf) {
  if constexpr (std::is_same_v<T, C>) {
    if (s == int64_t(sizeof(T))) return reinterpret_cast<C*>(p);
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
    C* y = out_block<T>(p[0] + i * s[0], s[0], ybuf);
    unary_block<C>(op, x, y, m);
    store_block<T>(p[0] + i * s[0], s[0], m, y);
  }
}

template <class T>
void binary_float_row(BinaryOp op, const Source<T>& a, const Source<T>& b, char* out,
                      int64_t out_stride, int64_t n) {
  using C = compute_t<T>;
  alignas(64) C abuf[kBlock], bbuf[kBlock], obuf[kBlock];
  if (a.constant) std::fill_n(abuf, std::min(kBlock, n), a.value);
  if (b.constant) std::fill_n(bbuf, std::min(kBlock, n), b.value);
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    const C* x = a.constant ? abuf : load_block<T>(a.p + i * a.stride, a.stride, m, abuf);
    const C* y = b.constant ? bbuf : load_block<T>(b.p + i * b.stride, b.stride, m, bbuf);
    C* o = out_block<T>(out + i * out_stride, out_stride, obuf);
    binary_block<C>(op, x, y, o, m);
    store_block<T>(out + i * out_stride, out_stride, m, o);
  }
}

// --- Scalar paths: integers, comparisons, logical ops ------------------------

template <class C>
C int_pow(C base, C exp) {
  if constexpr (std::is_same_v<C, bool>) {
    return base || !exp;
  } else if constexpr (std::is_floating_point_v<C>) {
    return std::pow(base, exp);
  } else {
    if (exp < C(0)) return base == C(1) ? C(1) : base == C(-1) ? C((exp % 2) ? -1 : 1) : C(0);
    C result = 1;
    for (; exp > C(0); exp /= 2, base *= base)
      if (exp % 2) result *= base;
    return result;
  }
}

// The type integer arithmetic runs in: unsigned, so overflow wraps instead
// of being undefined.
template <class C>
struct wrapping {
  using type = C;
};
template <class C>
requires(std::is_integral_v<C> && !std::is_same_v<C, bool>) struct wrapping<C> {
  using type = std::make_unsigned_t<C>;
};

// a op b for the ops the scalar path serves.
template <BinaryOp op, class C>
inline auto scalar_op(C a, C b) {
  using W = typename wrapping<C>::type;
  if constexpr (op == BinaryOp::kAdd)
    return C(W(a) + W(b));
  else if constexpr (op == BinaryOp::kSub)
    return C(W(a) - W(b));
  else if constexpr (op == BinaryOp::kMul)
    return C(W(a) * W(b));
  else if constexpr (op == BinaryOp::kPow)
    return int_pow(a, b);
  else if constexpr (op == BinaryOp::kMaximum)
    return a > b ? a : b;
  else if constexpr (op == BinaryOp::kMinimum)
    return a < b ? a : b;
  else if constexpr (op == BinaryOp::kEq)
    return a == b;
  else if constexpr (op == BinaryOp::kNe)
    return a != b;
  else if constexpr (op == BinaryOp::kLt)
    return a < b;
  else if constexpr (op == BinaryOp::kLe)
    return a <= b;
  else if constexpr (op == BinaryOp::kGt)
    return a > b;
  else if constexpr (op == BinaryOp::kGe)
    return a >= b;
  else if constexpr (op == BinaryOp::kLogicalAnd)
    return a != C(0) && b != C(0);
  else
    return a != C(0) || b != C(0);  // kLogicalOr
}

// One row of out = a op b on the scalar path (operands 0, 1, 2 = out, a, b).
template <BinaryOp op, class T>
void scalar_binary_row(char* const* p, const int64_t* s, int64_t n) {
  using C = compute_t<T>;
  using Out = std::conditional_t<produces_bool(op), bool, T>;
  if (is_dense<Out, T, T>(s)) {
    Out* o = reinterpret_cast<Out*>(p[0]);
    const T* a = reinterpret_cast<const T*>(p[1]);
    const T* b = reinterpret_cast<const T*>(p[2]);
    for (int64_t i = 0; i < n; ++i) o[i] = Out(scalar_op<op, C>(C(a[i]), C(b[i])));
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    elem<Out>(p[0], s[0], i) =
        Out(scalar_op<op, C>(C(elem<T>(p[1], s[1], i)), C(elem<T>(p[2], s[2], i))));
}

// Calls f.template operator()<op>() with op as a compile-time constant, for
// the ops the scalar path serves; throws for the others.
template <class F>
void with_scalar_op(BinaryOp op, DType dt, F&& f) {
  switch (op) {
    case BinaryOp::kAdd:
      return f.template operator()<BinaryOp::kAdd>();
    case BinaryOp::kSub:
      return f.template operator()<BinaryOp::kSub>();
    case BinaryOp::kMul:
      return f.template operator()<BinaryOp::kMul>();
    case BinaryOp::kPow:
      return f.template operator()<BinaryOp::kPow>();
    case BinaryOp::kMaximum:
      return f.template operator()<BinaryOp::kMaximum>();
    case BinaryOp::kMinimum:
      return f.template operator()<BinaryOp::kMinimum>();
    case BinaryOp::kEq:
      return f.template operator()<BinaryOp::kEq>();
    case BinaryOp::kNe:
      return f.template operator()<BinaryOp::kNe>();
    case BinaryOp::kLt:
      return f.template operator()<BinaryOp::kLt>();
    case BinaryOp::kLe:
      return f.template operator()<BinaryOp::kLe>();
    case BinaryOp::kGt:
      return f.template operator()<BinaryOp::kGt>();
    case BinaryOp::kGe:
      return f.template operator()<BinaryOp::kGe>();
    case BinaryOp::kLogicalAnd:
      return f.template operator()<BinaryOp::kLogicalAnd>();
    case BinaryOp::kLogicalOr:
      return f.template operator()<BinaryOp::kLogicalOr>();
    default:
      SPMD_THROW(InvalidArgument, op_name(op), ": not defined for ", dtype_name(dt), " tensors");
  }
}

// The scalar path over a loop of (out, a, b).
template <class T>
void scalar_binary(BinaryOp op, const StridedLoop<3>& loop, DType dt) {
  with_scalar_op(op, dt,
                 [&]<BinaryOp kOp>() { for_each_row(loop, kGrain, scalar_binary_row<kOp, T>); });
}

// Integer unary ops (the floating-only ones never reach here: the front end
// converts integer inputs of exp, tanh... to f32).
template <class T>
void unary_integer(UnaryOp op, const StridedLoop<2>& loop, DType dt) {
  auto run = [&](auto f) {
    for_each_row(loop, kGrain, [f](char* const* p, const int64_t* s, int64_t n) {
      if (is_dense<T, T>(s)) {
        T* o = reinterpret_cast<T*>(p[0]);
        const T* x = reinterpret_cast<const T*>(p[1]);
        for (int64_t i = 0; i < n; ++i) o[i] = f(x[i]);
        return;
      }
      for (int64_t i = 0; i < n; ++i) elem<T>(p[0], s[0], i) = f(elem<T>(p[1], s[1], i));
    });
  };
  if constexpr (!std::is_same_v<T, bool>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case UnaryOp::kNeg:
        return run([](T v) { return T(U(0) - U(v)); });
      case UnaryOp::kAbs:
        return run([](T v) { return v < 0 ? T(U(0) - U(v)) : v; });
      case UnaryOp::kSquare:
        return run([](T v) { return T(U(v) * U(v)); });
      case UnaryOp::kSign:
        return run([](T v) { return T((v > 0) - (v < 0)); });
      case UnaryOp::kRelu:
        return run([](T v) { return v > 0 ? v : T(0); });
      default:
        break;
    }
  }
  SPMD_THROW(InvalidArgument, op_name(op), ": not defined for ", dtype_name(dt), " tensors");
}

// loop2 (out, a) with a third operand that reads `value` everywhere (stride
// 0), placed first (s op a) or second (a op s).
StridedLoop<3> with_constant(const StridedLoop<2>& loop2, const void* value, bool scalar_first) {
  StridedLoop<3> loop;
  loop.ndim = loop2.ndim;
  loop.numel = loop2.numel;
  std::copy_n(loop2.sizes, loop2.ndim, loop.sizes);
  const int a = scalar_first ? 2 : 1, c = scalar_first ? 1 : 2;
  std::copy_n(loop2.strides[0], loop2.ndim, loop.strides[0]);
  std::copy_n(loop2.strides[1], loop2.ndim, loop.strides[a]);
  loop.data[0] = loop2.data[0];
  loop.data[a] = loop2.data[1];
  loop.data[c] = static_cast<char*>(const_cast<void*>(value));
  return loop;
}

}  // namespace

void CpuBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  const StridedLoop<2> loop = make_loop<2>({&out, &x});
  visit_dtype(x.dtype(), [&]<class T>() {
    if (op == UnaryOp::kLogicalNot) {
      for_each_row(loop, kGrain, [](char* const* p, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i)
          elem<bool>(p[0], s[0], i) = !convert_to<bool>(elem<T>(p[1], s[1], i));
      });
    } else if constexpr (is_float_v<T>) {
      for_each_row(
          loop, is_costly(op) ? kCostlyGrain : kGrain,
          [op](char* const* p, const int64_t* s, int64_t n) { unary_float_row<T>(op, p, s, n); });
    } else {
      unary_integer<T>(op, loop, x.dtype());
    }
  });
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
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
    scalar_binary<T>(op, loop, a.dtype());
  });
}

void CpuBackend::binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out,
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
    scalar_binary<T>(op, with_constant(loop, &value, scalar_first), a.dtype());
  });
}

}  // namespace spmd::cpu
