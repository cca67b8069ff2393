// The scalar path of elementwise ops (scalar_ops.h): integer arithmetic,
// comparisons and logical ops, one element at a time. Each op is a template
// argument, so a dense row is a plain loop the compiler vectorizes.
#include "tensor/cpu/scalar_ops.h"

#include <cmath>

namespace spmd::cpu {
namespace {

// base^exp by repeated squaring. A negative exponent gives the integer part
// of the true power: 0 unless |base| is 1.
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
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
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

}  // namespace

void scalar_binary(BinaryOp op, const StridedLoop<3>& loop, DType dtype) {
  visit_dtype(dtype, [&]<class T>() {
    with_scalar_op(op, dtype,
                   [&]<BinaryOp kOp>() { for_each_row(loop, kGrain, scalar_binary_row<kOp, T>); });
  });
}

void scalar_unary(UnaryOp op, const StridedLoop<2>& loop, DType dtype) {
  visit_dtype(dtype, [&]<class T>() {
    if (op == UnaryOp::kLogicalNot) {
      for_each_row(loop, kGrain, [](char* const* p, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i)
          elem<bool>(p[0], s[0], i) = !convert_to<bool>(elem<T>(p[1], s[1], i));
      });
      return;
    }
    unary_integer<T>(op, loop, dtype);
  });
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

}  // namespace spmd::cpu
