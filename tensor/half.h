// The two 16-bit floating-point storage types, bf16 and f16, as plain structs of
// bits with conversions to and from float. The CPU computes in f32 and rounds
// back (round to nearest even); these types exist so tensors can hold them and
// cross devices and files bit for bit.
//
//   bf16: 1 sign, 8 exponent, 7 mantissa bits: the top half of an f32.
//   f16:  1 sign, 5 exponent, 10 mantissa bits (IEEE 754 binary16).
#pragma once

#include <cstdint>
#include <cstring>

namespace spmd {

struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  BFloat16(float f) : bits(round_from_float(f)) {}  // NOLINT: implicit, like a float
  operator float() const {                          // NOLINT
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }

 private:
  static uint16_t round_from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
    uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);                  // ties to even
    return uint16_t((u + rounding_bias) >> 16);
  }
};

struct Half {
  uint16_t bits = 0;

  Half() = default;
  Half(float f) : bits(from_float(f)) {}  // NOLINT
  operator float() const { return to_float(bits); }  // NOLINT
  static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }

 private:
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    const uint32_t sign = (u >> 16) & 0x8000u;
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return uint16_t(sign | 0x7e00u);    // NaN
    if (u >= 0x477ff000u) return uint16_t(sign | 0x7c00u);   // overflow (and inf) -> inf
    if (u < 0x38800000u) {                                   // subnormal or zero in f16
      if (u < 0x33000000u) return uint16_t(sign);            // below half the smallest: 0
      const uint32_t exp = u >> 23;
      const uint32_t mant = (u & 0x7fffffu) | 0x800000u;
      const uint32_t shift = 126 - exp;                      // 14..24
      uint32_t h = mant >> shift;
      const uint32_t rem = mant & ((1u << shift) - 1);
      const uint32_t half = 1u << (shift - 1);
      if (rem > half || (rem == half && (h & 1u))) ++h;
      return uint16_t(sign | h);
    }
    uint32_t h = ((u - 0x38000000u) >> 13);                  // rebias exponent 127 -> 15
    const uint32_t rem = u & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // ties to even
    return uint16_t(sign | h);
  }
  static float to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
      u = sign | 0x7f800000u | (mant << 13);                 // inf or NaN
    } else if (exp != 0) {
      u = sign | ((exp + 112) << 23) | (mant << 13);         // normal
    } else if (mant == 0) {
      u = sign;                                              // zero
    } else {                                                 // subnormal: normalize
      exp = 113;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      u = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
};

}  // namespace spmd
