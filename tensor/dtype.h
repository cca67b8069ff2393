// Element types. A tensor's dtype says how its bytes are read; `visit_dtype`
// turns a runtime dtype into a compile-time C++ type, so one templated loop
// serves every type:
//
//   visit_dtype(t.dtype(), "sum", [&]<class T>() { total += sum_of<T>(t); });
#pragma once

#include <cstdint>
#include <ostream>
#include <string_view>

#include "runtime/error.h"
#include "tensor/half.h"

namespace spmd {

enum class DType : uint8_t { kF32, kF64, kBF16, kF16, kI32, kI64, kU8, kBool };

// Bytes per element.
size_t element_size(DType dt);
// "f32", "bf16", ... (the names the safetensors format and our printing use
// are in safetensors.cpp and print.cpp).
std::string_view dtype_name(DType dt);
// Parses "f32", "float32", "bf16", "bfloat16", "i64", ...; throws on anything else.
DType parse_dtype(std::string_view name);

inline bool is_floating(DType dt) {
  return dt == DType::kF32 || dt == DType::kF64 || dt == DType::kBF16 || dt == DType::kF16;
}
inline bool is_half_float(DType dt) { return dt == DType::kBF16 || dt == DType::kF16; }

// The dtype two operands meet in, as in PyTorch: floating wins over integer,
// the wider float wins; bf16 with f16 gives f32.
DType promote_types(DType a, DType b);

inline std::ostream& operator<<(std::ostream& os, DType dt) { return os << dtype_name(dt); }

// The DType of a C++ element type: dtype_of<float>() == DType::kF32.
template <class T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kF32; }
template <> constexpr DType dtype_of<double>() { return DType::kF64; }
template <> constexpr DType dtype_of<BFloat16>() { return DType::kBF16; }
template <> constexpr DType dtype_of<Half>() { return DType::kF16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kI32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kI64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::kU8; }
template <> constexpr DType dtype_of<bool>() { return DType::kBool; }

// Calls f.template operator()<T>() with T the C++ type of `dt`.
template <class F>
decltype(auto) visit_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::kF32: return f.template operator()<float>();
    case DType::kF64: return f.template operator()<double>();
    case DType::kBF16: return f.template operator()<BFloat16>();
    case DType::kF16: return f.template operator()<Half>();
    case DType::kI32: return f.template operator()<int32_t>();
    case DType::kI64: return f.template operator()<int64_t>();
    case DType::kU8: return f.template operator()<uint8_t>();
    case DType::kBool: return f.template operator()<bool>();
  }
  SPMD_THROW(InvalidArgument, "unknown dtype ", int(dt));
}

// As visit_dtype, for the types the CPU computes in directly (f32, f64); any
// other dtype throws an error naming `op`.
template <class F>
decltype(auto) visit_float(DType dt, std::string_view op, F&& f) {
  switch (dt) {
    case DType::kF32: return f.template operator()<float>();
    case DType::kF64: return f.template operator()<double>();
    default: SPMD_THROW(InvalidArgument, op, ": expected an f32 or f64 tensor, got ", dtype_name(dt));
  }
}

}  // namespace spmd
