// The scalar arithmetic of every elementwise op, in a compute type C (float,
// double or int64_t), written once and shared by the contiguous and strided
// kernels. The formulas are tensor/backend.h's; the activation backwards take
// dy and the forward input (or output, for sigmoid and tanh).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/elementwise.h"

namespace spmd::kernels {

// exp, log, ... for float and double (CUDA's overloads, named so that a float
// never silently widens to double).
__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }
__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float m_erf(float x) { return erff(x); }
__device__ __forceinline__ double m_erf(double x) { return erf(x); }
__device__ __forceinline__ float m_sin(float x) { return sinf(x); }
__device__ __forceinline__ double m_sin(double x) { return sin(x); }
__device__ __forceinline__ float m_cos(float x) { return cosf(x); }
__device__ __forceinline__ double m_cos(double x) { return cos(x); }
__device__ __forceinline__ float m_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double m_pow(double x, double y) { return pow(x, y); }

template <class C>
__device__ __forceinline__ C sigmoid(C x) {
  return C(1) / (C(1) + m_exp(-x));
}

// d gelu_tanh(x) / dx with u = k (x + c x^3), k = sqrt(2/pi), c = 0.044715.
template <class C>
__device__ __forceinline__ C gelu_tanh_grad(C x) {
  const C k = C(0.7978845608028654), c = C(0.044715);
  const C t = m_tanh(k * (x + c * x * x * x));
  return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * k * (C(1) + C(3) * c * x * x);
}

// d gelu_erf(x) / dx = Phi(x) + x phi(x).
template <class C>
__device__ __forceinline__ C gelu_erf_grad(C x) {
  const C inv_sqrt2 = C(0.7071067811865476), inv_sqrt_2pi = C(0.3989422804014327);
  return C(0.5) * (C(1) + m_erf(x * inv_sqrt2)) + x * inv_sqrt_2pi * m_exp(C(-0.5) * x * x);
}

template <class C>
__device__ __forceinline__ C unary_op(UnaryOp op, C x) {
  if constexpr (std::is_integral_v<C>) {
    switch (op) {
      case UnaryOp::kNeg:
        return -x;
      case UnaryOp::kAbs:
        return x < 0 ? -x : x;
      case UnaryOp::kRelu:
        return x > 0 ? x : 0;
      case UnaryOp::kSquare:
        return x * x;
      case UnaryOp::kSign:
        return (x > 0) - (x < 0);
      case UnaryOp::kLogicalNot:
        return x == 0;
      default:
        return static_cast<C>(unary_op<double>(op, static_cast<double>(x)));
    }
  } else {
    switch (op) {
      case UnaryOp::kNeg:
        return -x;
      case UnaryOp::kAbs:
        return x < 0 ? -x : x;
      case UnaryOp::kExp:
        return m_exp(x);
      case UnaryOp::kLog:
        return m_log(x);
      case UnaryOp::kSqrt:
        return m_sqrt(x);
      case UnaryOp::kRsqrt:
        return C(1) / m_sqrt(x);
      case UnaryOp::kTanh:
        return m_tanh(x);
      case UnaryOp::kSigmoid:
        return sigmoid(x);
      case UnaryOp::kRelu:
        return x > C(0) ? x : (x != x ? x : C(0));
      case UnaryOp::kGeluTanh: {
        const C k = C(0.7978845608028654), c = C(0.044715);
        return C(0.5) * x * (C(1) + m_tanh(k * (x + c * x * x * x)));
      }
      case UnaryOp::kGeluErf:
        return C(0.5) * x * (C(1) + m_erf(x * C(0.7071067811865476)));
      case UnaryOp::kSilu:
        return x * sigmoid(x);
      case UnaryOp::kSin:
        return m_sin(x);
      case UnaryOp::kCos:
        return m_cos(x);
      case UnaryOp::kSquare:
        return x * x;
      case UnaryOp::kReciprocal:
        return C(1) / x;
      case UnaryOp::kSign:
        return x != x ? x : C((x > C(0)) - (x < C(0)));
      case UnaryOp::kLogicalNot:
        return x == C(0) ? C(1) : C(0);
    }
    return x;
  }
}

// max and min propagate NaN, as PyTorch's maximum and minimum do.
template <class C>
__device__ __forceinline__ C max_nan(C a, C b) {
  if constexpr (!std::is_integral_v<C>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a > b ? a : b;
}
template <class C>
__device__ __forceinline__ C min_nan(C a, C b) {
  if constexpr (!std::is_integral_v<C>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a < b ? a : b;
}

template <class C>
__device__ __forceinline__ C int_pow(C base, C exp) {
  if (exp < 0) return base == 1 ? 1 : (base == -1 ? ((exp & 1) ? -1 : 1) : 0);
  C r = 1;
  while (exp) {
    if (exp & 1) r *= base;
    base *= base;
    exp >>= 1;
  }
  return r;
}

template <class C>
__device__ __forceinline__ C binary_op(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
    case BinaryOp::kDiv:
      if constexpr (std::is_integral_v<C>)
        return b == 0 ? 0 : a / b;
      else
        return a / b;
    case BinaryOp::kPow:
      if constexpr (std::is_integral_v<C>)
        return int_pow(a, b);
      else
        return m_pow(a, b);
    case BinaryOp::kMaximum:
      return max_nan(a, b);
    case BinaryOp::kMinimum:
      return min_nan(a, b);
    case BinaryOp::kEq:
      return C(a == b);
    case BinaryOp::kNe:
      return C(a != b);
    case BinaryOp::kLt:
      return C(a < b);
    case BinaryOp::kLe:
      return C(a <= b);
    case BinaryOp::kGt:
      return C(a > b);
    case BinaryOp::kGe:
      return C(a >= b);
    case BinaryOp::kLogicalAnd:
      return C(a != C(0) && b != C(0));
    case BinaryOp::kLogicalOr:
      return C(a != C(0) || b != C(0));
    case BinaryOp::kReluBackward:
      return b > C(0) ? a : C(0);
    default:
      break;
  }
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(binary_op<double>(op, double(a), double(b)));
  } else {
    switch (op) {
      case BinaryOp::kGeluTanhBackward:
        return a * gelu_tanh_grad(b);
      case BinaryOp::kGeluErfBackward:
        return a * gelu_erf_grad(b);
      case BinaryOp::kSiluBackward: {
        const C s = sigmoid(b);
        return a * s * (C(1) + b * (C(1) - s));
      }
      case BinaryOp::kSigmoidBackward:
        return a * b * (C(1) - b);
      case BinaryOp::kTanhBackward:
        return a * (C(1) - b * b);
      default:
        return C(0);
    }
  }
}

}  // namespace spmd::kernels
