// Half / BFloat16: exactness, rounding to nearest even, subnormals, overflow, inf, NaN.
#include "base/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "base/convert.h"

namespace sampan {
namespace {

float Bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Half, ExactValues) {
  EXPECT_EQ(Half::FromFloat(0.f), 0x0000);
  EXPECT_EQ(Half::FromFloat(-0.f), 0x8000);
  EXPECT_EQ(Half::FromFloat(1.f), 0x3c00);
  EXPECT_EQ(Half::FromFloat(-2.f), 0xc000);
  EXPECT_EQ(Half::FromFloat(0.5f), 0x3800);
  EXPECT_EQ(Half::FromFloat(65504.f), 0x7bff);               // largest finite
  EXPECT_EQ(Half::FromFloat(std::ldexp(1.f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(Half::ToFloat(0x3c00), 1.f);
  EXPECT_EQ(Half::ToFloat(0x7bff), 65504.f);
  EXPECT_EQ(Half::ToFloat(0xc000), -2.f);
  EXPECT_TRUE(std::signbit(Half::ToFloat(0x8000)));
}

TEST(Half, Subnormals) {
  EXPECT_EQ(Half::FromFloat(std::ldexp(1.f, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(Half::FromFloat(std::ldexp(1023.f, -24)), 0x03ff);  // largest subnormal
  EXPECT_EQ(Half::ToFloat(0x0001), std::ldexp(1.f, -24));
  EXPECT_EQ(Half::ToFloat(0x03ff), std::ldexp(1023.f, -24));
  EXPECT_EQ(Half::ToFloat(0x8001), -std::ldexp(1.f, -24));
  // Halfway between 0 and the smallest subnormal rounds to even (0); just above rounds up.
  EXPECT_EQ(Half::FromFloat(std::ldexp(1.f, -25)), 0x0000);
  EXPECT_EQ(Half::FromFloat(std::ldexp(1.5f, -25)), 0x0001);
  // 1.5 * 2^-24 is halfway between subnormals 1 and 2: ties to even -> 2.
  EXPECT_EQ(Half::FromFloat(std::ldexp(1.5f, -24)), 0x0002);
  // 2.5 * 2^-24: halfway between 2 and 3 -> 2.
  EXPECT_EQ(Half::FromFloat(std::ldexp(2.5f, -24)), 0x0002);
  EXPECT_EQ(Half::FromFloat(std::ldexp(1.f, -30)), 0x0000);
  EXPECT_EQ(Half::FromFloat(-std::ldexp(1.f, -30)), 0x8000);
  // Largest subnormal + half an ulp rounds up into the smallest normal.
  EXPECT_EQ(Half::FromFloat(std::ldexp(1023.5f, -24)), 0x0400);
}

TEST(Half, RoundToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1+2^-10: ties to even (1).
  EXPECT_EQ(Half::FromFloat(1.f + std::ldexp(1.f, -11)), 0x3c00);
  // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even): rounds up.
  EXPECT_EQ(Half::FromFloat(1.f + 3 * std::ldexp(1.f, -11)), 0x3c02);
  // Slightly above halfway rounds up.
  EXPECT_EQ(Half::FromFloat(Bits(0x3f801001)), 0x3c01);
  EXPECT_EQ(Half::FromFloat(0.1f), 0x2e66);
}

TEST(Half, OverflowInfNaN) {
  EXPECT_EQ(Half::FromFloat(65519.f), 0x7bff);  // below the rounding midpoint
  EXPECT_EQ(Half::FromFloat(65520.f), 0x7c00);  // midpoint rounds to inf
  EXPECT_EQ(Half::FromFloat(1e6f), 0x7c00);
  EXPECT_EQ(Half::FromFloat(-1e6f), 0xfc00);
  EXPECT_EQ(Half::FromFloat(INFINITY), 0x7c00);
  EXPECT_EQ(Half::FromFloat(-INFINITY), 0xfc00);
  EXPECT_TRUE(std::isinf(Half::ToFloat(0x7c00)));
  const uint16_t nan = Half::FromFloat(NAN);
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(Half::ToFloat(nan)));
  EXPECT_TRUE(std::isnan(Half::ToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(Half::ToFloat(0xfc01)));
}

TEST(Half, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = Half::ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Half::ToFloat(Half::FromFloat(f))));
      continue;
    }
    ASSERT_EQ(Half::FromFloat(f), h) << std::hex << h;
  }
}

TEST(BFloat16, ExactRoundingAndSpecials) {
  EXPECT_EQ(BFloat16::FromFloat(1.f), 0x3f80);
  EXPECT_EQ(BFloat16::FromFloat(-2.f), 0xc000);
  EXPECT_EQ(BFloat16::ToFloat(0x3f80), 1.f);
  // Halfway cases: ties to even.
  EXPECT_EQ(BFloat16::FromFloat(Bits(0x3f808000)), 0x3f80);  // tie, even stays
  EXPECT_EQ(BFloat16::FromFloat(Bits(0x3f818000)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(BFloat16::FromFloat(Bits(0x3f808001)), 0x3f81);  // above tie
  // Subnormals keep their top bits.
  EXPECT_EQ(BFloat16::FromFloat(Bits(0x00010000)), 0x0001);
  EXPECT_EQ(BFloat16::ToFloat(0x0001), Bits(0x00010000));
  // Overflow rounds to inf, inf stays inf, NaN stays NaN (never becomes inf).
  EXPECT_EQ(BFloat16::FromFloat(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(BFloat16::FromFloat(INFINITY), 0x7f80);
  EXPECT_EQ(BFloat16::FromFloat(-INFINITY), 0xff80);
  EXPECT_TRUE(std::isnan(BFloat16::ToFloat(BFloat16::FromFloat(NAN))));
  EXPECT_TRUE(std::isnan(BFloat16::ToFloat(BFloat16::FromFloat(Bits(0x7f800001)))));  // low-payload NaN
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = BFloat16::ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(BFloat16::FromFloat(f), b) << std::hex << b;
  }
}

TEST(ConvertElement, CastSemantics) {
  EXPECT_EQ(ConvertElement<int32_t>(2.9f), 2);
  EXPECT_EQ(ConvertElement<int32_t>(-2.9f), -2);
  EXPECT_EQ(ConvertElement<bool>(0.5f), true);
  EXPECT_EQ(ConvertElement<bool>(0), false);
  EXPECT_EQ(ConvertElement<int8_t>(NAN), 0);
  EXPECT_EQ(ConvertElement<int8_t>(1000.f), 127);
  EXPECT_EQ(ConvertElement<int8_t>(-1000.f), -128);
  EXPECT_EQ(static_cast<float>(ConvertElement<Half>(3)), 3.f);
  EXPECT_EQ(ConvertElement<int64_t>(Half(7.5f)), 7);
  EXPECT_EQ(ConvertElement<float>(BFloat16(1.5f)), 1.5f);
  EXPECT_EQ(Half(ConvertElement<Half>(BFloat16(2.f))).bits, 0x4000);
}

}  // namespace
}  // namespace sampan
