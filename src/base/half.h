// IEEE half (binary16) and bfloat16 storage types. Arithmetic happens in float:
// convert, compute, convert back (round to nearest even).
#pragma once

#include <cstdint>
#include <cstring>

namespace sampan {

struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f) : bits(FromFloat(f)) {}
  operator float() const { return ToFloat(bits); }  // NOLINT(google-explicit-constructor)
  static uint16_t FromFloat(float f);
  static float ToFloat(uint16_t h);
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(FromFloat(f)) {}
  operator float() const { return ToFloat(bits); }  // NOLINT(google-explicit-constructor)
  static uint16_t FromFloat(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
  static float ToFloat(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

inline float Half::ToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      u = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | mant << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t Half::FromFloat(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (abs >= 0x47800000u) {                      // >= 65536 before rounding: overflow to inf
    // Values in [65520, 65536) round to inf as well; handled below by rounding.
    return sign | 0x7c00u;
  }
  if (abs < 0x38800000u) {               // below the smallest normal half: subnormal or zero
    if (abs < 0x33000000u) return sign;  // < 2^-25 rounds to zero
    uint32_t e = abs >> 23;
    uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14 - (e - 127) + 13 - 1 ... aligns to the 10-bit subnormal field
    uint32_t half_m = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_m & 1u))) ++half_m;
    return sign | static_cast<uint16_t>(half_m);
  }
  uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even
  r -= 0x38000000u;                                // rebias exponent 127 -> 15
  if (r >= 0x0f800000u) return sign | 0x7c00u;     // rounded up to inf
  return sign | static_cast<uint16_t>(r >> 13);
}

}  // namespace sampan
