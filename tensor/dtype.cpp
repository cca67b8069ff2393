// Element sizes, names, parsing and promotion of dtypes.
#include "tensor/dtype.h"

namespace spmd {

size_t element_size(DType dt) {
  switch (dt) {
    case DType::kF64:
    case DType::kI64: return 8;
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kBF16:
    case DType::kF16: return 2;
    case DType::kU8:
    case DType::kBool: return 1;
  }
  SPMD_THROW(InvalidArgument, "unknown dtype ", int(dt));
}

std::string_view dtype_name(DType dt) {
  switch (dt) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
    case DType::kBool: return "bool";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  struct Alias { std::string_view name; DType dt; };
  static constexpr Alias kAliases[] = {
      {"f32", DType::kF32},   {"float32", DType::kF32},  {"float", DType::kF32},
      {"f64", DType::kF64},   {"float64", DType::kF64},  {"double", DType::kF64},
      {"bf16", DType::kBF16}, {"bfloat16", DType::kBF16},
      {"f16", DType::kF16},   {"float16", DType::kF16},  {"half", DType::kF16},
      {"i32", DType::kI32},   {"int32", DType::kI32},    {"int", DType::kI32},
      {"i64", DType::kI64},   {"int64", DType::kI64},    {"long", DType::kI64},
      {"u8", DType::kU8},     {"uint8", DType::kU8},     {"bool", DType::kBool},
  };
  for (const Alias& a : kAliases)
    if (a.name == name) return a.dt;
  SPMD_THROW(InvalidArgument, "unknown dtype '", name,
             "' (expected f32, f64, bf16, f16, i32, i64, u8 or bool)");
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (fa && fb) {
    if (a == DType::kF64 || b == DType::kF64) return DType::kF64;
    return DType::kF32;  // f32 with a half type, or bf16 with f16
  }
  // Both integral (or bool): the wider one; bool and u8 give way to anything.
  auto width = [](DType d) { return d == DType::kBool ? 0 : int(element_size(d)); };
  return width(a) >= width(b) ? a : b;
}

}  // namespace spmd
