// dtypes: sizes, names, promotion, and the two 16-bit float formats checked
// against bit patterns worked out by hand.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "tensor/dtype.h"
#include "tensor/shape.h"

using namespace spmd;

TEST_CASE("element sizes and names", "[dtype]") {
  CHECK(element_size(DType::kF32) == 4);
  CHECK(element_size(DType::kBF16) == 2);
  CHECK(element_size(DType::kI64) == 8);
  CHECK(element_size(DType::kBool) == 1);
  CHECK(parse_dtype("bfloat16") == DType::kBF16);
  CHECK(dtype_name(DType::kF16) == "f16");
  CHECK_THROWS_WITH(parse_dtype("f128"), Catch::Contains("unknown dtype 'f128'"));
}

TEST_CASE("type promotion follows PyTorch", "[dtype]") {
  CHECK(promote_types(DType::kF32, DType::kI64) == DType::kF32);
  CHECK(promote_types(DType::kBF16, DType::kF16) == DType::kF32);
  CHECK(promote_types(DType::kF64, DType::kF32) == DType::kF64);
  CHECK(promote_types(DType::kI32, DType::kI64) == DType::kI64);
  CHECK(promote_types(DType::kBool, DType::kI32) == DType::kI32);
  CHECK(promote_types(DType::kBF16, DType::kI64) == DType::kBF16);
}

TEST_CASE("bf16 keeps the top half of an f32, rounding to nearest even", "[dtype]") {
  CHECK(BFloat16(1.0f).bits == 0x3f80);
  CHECK(BFloat16(-2.0f).bits == 0xc000);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  CHECK(BFloat16(1.00390625f).bits == 0x3f80);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even): up.
  CHECK(BFloat16(1.01171875f).bits == 0x3f82);
  CHECK(float(BFloat16::from_bits(0x4049)) == 3.140625f);
  CHECK(std::isnan(float(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("f16 conversions match IEEE binary16", "[dtype]") {
  CHECK(Half(1.0f).bits == 0x3c00);
  CHECK(Half(-2.5f).bits == 0xc100);
  CHECK(Half(65504.0f).bits == 0x7bff);                // largest finite
  CHECK(Half(1e6f).bits == 0x7c00);                    // overflow to inf
  CHECK(Half(5.960464477539063e-08f).bits == 0x0001);  // smallest subnormal, 2^-24
  CHECK(float(Half::from_bits(0x0001)) == std::ldexp(1.0f, -24));
  CHECK(float(Half::from_bits(0x3555)) == 0.333251953125f);
  // Every finite f16 survives a round trip through f32.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7c00) == 0x7c00) continue;  // inf and NaN
    REQUIRE(Half(float(Half::from_bits(uint16_t(b)))).bits == b);
  }
}

TEST_CASE("Shape counts elements and prints like a list", "[shape]") {
  Shape s{2, 3, 4};
  CHECK(s.numel() == 24);
  CHECK(Shape{}.numel() == 1);
  CHECK(contiguous_strides(s) == Shape{12, 4, 1});
  s.insert(1, 5);
  CHECK(s == Shape{2, 5, 3, 4});
  s.erase(0);
  CHECK(str_cat(s) == "[5, 3, 4]");
  CHECK_THROWS_WITH(Shape({1, 1, 1, 1, 1, 1, 1, 1, 1}), Catch::Contains("at most 8 dims"));
  CHECK_THROWS_WITH(wrap_dim(3, 3, "sum"), Catch::Contains("sum: dim 3 is out of range"));
  CHECK(wrap_dim(-1, 3, "sum") == 2);
}
