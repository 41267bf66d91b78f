// float8 / float4 / float6 / e8m0 conversions and 2/4/6-bit packing, against hand-checked
// codes (each value's bits worked out from the format: sign | exponent | mantissa).
#include "base/small_types.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/npy.h"
#include "base/tensor.h"

namespace sampan {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");

uint8_t Enc(DType t, double v, bool saturate = true) {
  return SmallFloatFromDouble(t, v, saturate);
}

TEST(Float8E4M3FN, Codes) {
  const DType t = DType::kFloat8E4M3FN;
  EXPECT_EQ(Enc(t, 1.0), 0x38);                   // 0 0111 000
  EXPECT_EQ(Enc(t, -2.0), 0xc0);                  // 1 1000 000
  EXPECT_EQ(Enc(t, 448.0), 0x7e);                 // largest finite: 0 1111 110
  EXPECT_EQ(Enc(t, std::ldexp(1.0, -6)), 0x08);   // smallest normal
  EXPECT_EQ(Enc(t, std::ldexp(1.0, -9)), 0x01);   // smallest subnormal
  EXPECT_EQ(Enc(t, std::ldexp(1.0, -10)), 0x00);  // half of it: tie to even (0)
  EXPECT_EQ(Enc(t, std::ldexp(3.0, -10)), 0x02);  // 1.5 subnormal ulps: tie to even (2)
  EXPECT_EQ(Enc(t, 1.0 + 1.0 / 16), 0x38);        // 1 + half an ulp: tie to even (1.0)
  EXPECT_EQ(Enc(t, 1.0 + 3.0 / 16), 0x3a);        // 1.125 + half an ulp: tie to even (1.25)
  EXPECT_EQ(Enc(t, -0.0), 0x80);
  EXPECT_EQ(Enc(t, 464.0, false), 0x7e);  // tie between 448 and (missing) 480: even, 448
  EXPECT_EQ(Enc(t, 465.0, false), 0x7f);  // rounds past 448: NaN without saturate
  EXPECT_EQ(Enc(t, 465.0, true), 0x7e);
  EXPECT_EQ(Enc(t, kInf, false), 0x7f);
  EXPECT_EQ(Enc(t, -kInf, false), 0xff);
  EXPECT_EQ(Enc(t, -kInf, true), 0xfe);
  EXPECT_EQ(Enc(t, kNaN), 0x7f);
  EXPECT_EQ(SmallFloatToDouble(t, 0x7e), 448.0);
  EXPECT_EQ(SmallFloatToDouble(t, 0x01), std::ldexp(1.0, -9));
  EXPECT_TRUE(std::isnan(SmallFloatToDouble(t, 0x7f)));
  EXPECT_TRUE(std::isnan(SmallFloatToDouble(t, 0xff)));
  EXPECT_EQ(SmallFloatToDouble(t, 0x78), 256.0);  // exponent field 15 is a normal binade here
  EXPECT_EQ(SmallFloatMax(t), 448.0);
}

TEST(Float8E4M3FNUZ, Codes) {
  const DType t = DType::kFloat8E4M3FNUZ;
  EXPECT_EQ(Enc(t, 1.0), 0x40);                   // bias 8: 0 1000 000
  EXPECT_EQ(Enc(t, 240.0), 0x7f);                 // largest finite: 0 1111 111
  EXPECT_EQ(Enc(t, std::ldexp(1.0, -10)), 0x01);  // smallest subnormal
  EXPECT_EQ(Enc(t, 248.0, false), 0x80);          // tie between 240 and 256: even (256) overflows to NaN
  EXPECT_EQ(Enc(t, 248.0, true), 0x7f);
  EXPECT_EQ(Enc(t, -kInf, true), 0xff);
  EXPECT_EQ(Enc(t, kInf, false), 0x80);
  EXPECT_EQ(Enc(t, -0.0), 0x00);  // no negative zero
  EXPECT_EQ(Enc(t, -1e-7), 0x00);
  EXPECT_EQ(Enc(t, kNaN), 0x80);
  EXPECT_TRUE(std::isnan(SmallFloatToDouble(t, 0x80)));
  EXPECT_EQ(SmallFloatToDouble(t, 0xff), -240.0);
}

TEST(Float8E5M2, Codes) {
  const DType t = DType::kFloat8E5M2;
  EXPECT_EQ(Enc(t, 1.0), 0x3c);                   // 0 01111 00
  EXPECT_EQ(Enc(t, 57344.0), 0x7b);               // largest finite: 0 11110 11
  EXPECT_EQ(Enc(t, std::ldexp(1.0, -16)), 0x01);  // smallest subnormal
  EXPECT_EQ(Enc(t, 61440.0, false), 0x7c);        // tie between 57344 and 65536: even (65536) is inf
  EXPECT_EQ(Enc(t, 61440.0, true), 0x7b);
  EXPECT_EQ(Enc(t, 61439.0, false), 0x7b);
  EXPECT_EQ(Enc(t, -kInf, false), 0xfc);
  EXPECT_EQ(Enc(t, kInf, true), 0x7b);
  EXPECT_EQ(Enc(t, kNaN), 0x7e);
  EXPECT_EQ(SmallFloatToDouble(t, 0x7c), kInf);
  EXPECT_EQ(SmallFloatToDouble(t, 0xfc), -kInf);
  EXPECT_TRUE(std::isnan(SmallFloatToDouble(t, 0x7d)));
}

TEST(Float8E5M2FNUZ, Codes) {
  const DType t = DType::kFloat8E5M2FNUZ;
  EXPECT_EQ(Enc(t, 1.0), 0x40);  // bias 16
  EXPECT_EQ(Enc(t, 57344.0), 0x7f);
  EXPECT_EQ(Enc(t, std::ldexp(1.0, -17)), 0x01);
  EXPECT_EQ(Enc(t, 61440.0, false), 0x80);
  EXPECT_EQ(Enc(t, kInf, false), 0x80);
  EXPECT_EQ(Enc(t, kInf, true), 0x7f);
  EXPECT_EQ(Enc(t, -0.0), 0x00);
  EXPECT_TRUE(std::isnan(SmallFloatToDouble(t, 0x80)));
}

TEST(Float4E2M1, Codes) {
  const DType t = DType::kFloat4E2M1;
  const double values[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (uint8_t b = 0; b < 8; ++b) {
    EXPECT_EQ(SmallFloatToDouble(t, b), values[b]);
    EXPECT_EQ(SmallFloatToDouble(t, b | 8), -values[b]);
    EXPECT_EQ(Enc(t, values[b]), b);
  }
  EXPECT_EQ(Enc(t, 0.25), 0x0);  // ties to even
  EXPECT_EQ(Enc(t, 0.75), 0x2);
  EXPECT_EQ(Enc(t, 2.5), 0x4);
  EXPECT_EQ(Enc(t, -3.5), 0xe);
  EXPECT_EQ(Enc(t, 5.0), 0x6);
  EXPECT_EQ(Enc(t, 7.0, false), 0x7);  // no inf or NaN: always saturates
  EXPECT_EQ(Enc(t, kInf, false), 0x7);
  EXPECT_EQ(Enc(t, -kInf, false), 0xf);
  EXPECT_EQ(Enc(t, kNaN), 0x8);  // as ml_dtypes: a NaN becomes the zero of the other sign
  EXPECT_EQ(Enc(t, -kNaN), 0x0);
}

TEST(Float6, Codes) {
  EXPECT_EQ(Enc(DType::kFloat6E2M3, 7.5), 0x1f);
  EXPECT_EQ(Enc(DType::kFloat6E2M3, 100.0), 0x1f);
  EXPECT_EQ(Enc(DType::kFloat6E2M3, 0.125), 0x01);  // smallest subnormal
  EXPECT_EQ(Enc(DType::kFloat6E2M3, -1.0), 0x28);   // 1 01 000
  EXPECT_EQ(Enc(DType::kFloat6E3M2, 28.0), 0x1f);
  EXPECT_EQ(Enc(DType::kFloat6E3M2, 0.0625), 0x01);
  EXPECT_EQ(Enc(DType::kFloat6E3M2, 1.0), 0x0c);  // 0 011 00
  EXPECT_EQ(SmallFloatToDouble(DType::kFloat6E3M2, 0x3f), -28.0);
}

TEST(Float8E8M0, RoundingModes) {
  const auto up = E8M0Rounding::kUp, down = E8M0Rounding::kDown, near = E8M0Rounding::kNearest;
  EXPECT_EQ(ToFloat8E8M0(1.0f, true, up), 127);
  EXPECT_EQ(ToFloat8E8M0(1.1f, true, up), 128);
  EXPECT_EQ(ToFloat8E8M0(1.1f, true, down), 127);
  EXPECT_EQ(ToFloat8E8M0(1.25f, true, near), 127);  // guard bit clear
  EXPECT_EQ(ToFloat8E8M0(1.5f, true, near), 128);   // guard set, lsb (exponent > 0) set
  EXPECT_EQ(ToFloat8E8M0(0.124f, true, up), 124);   // 2^-3
  EXPECT_EQ(ToFloat8E8M0(-2.0f, true, up), 128);    // the sign is dropped
  EXPECT_EQ(ToFloat8E8M0(0.0f, true, up), 0);       // 2^-127
  EXPECT_EQ(ToFloat8E8M0(std::nanf(""), true, up), 0xff);
  EXPECT_EQ(ToFloat8E8M0(std::numeric_limits<float>::infinity(), true, down), 0xff);
  const float big = std::ldexp(1.5f, 127);
  EXPECT_EQ(ToFloat8E8M0(big, true, up), 0xfe);   // saturates at 2^127
  EXPECT_EQ(ToFloat8E8M0(big, false, up), 0xff);  // else rounds into NaN
  EXPECT_EQ(SmallFloatToDouble(DType::kFloat8E8M0, 0), std::ldexp(1.0, -127));
  EXPECT_EQ(SmallFloatToDouble(DType::kFloat8E8M0, 130), 8.0);
  EXPECT_TRUE(std::isnan(SmallFloatToDouble(DType::kFloat8E8M0, 0xff)));
}

TEST(NarrowInt, Conversions) {
  EXPECT_EQ(NarrowIntValue(DType::kInt4, 0x8), -8);
  EXPECT_EQ(NarrowIntValue(DType::kInt4, 0x7), 7);
  EXPECT_EQ(NarrowIntValue(DType::kUInt4, 0xf), 15);
  EXPECT_EQ(NarrowIntValue(DType::kInt2, 0x2), -2);
  EXPECT_EQ(NarrowIntValue(DType::kUInt2, 0x3), 3);
  EXPECT_EQ(NarrowIntWrap(DType::kInt4, 8), 0x8);  // integers wrap
  EXPECT_EQ(NarrowIntWrap(DType::kUInt4, -1), 0xf);
  EXPECT_EQ(NarrowIntWrap(DType::kInt2, -9), 0x3);
  // Floats truncate; out of range (after truncation) and NaN give 0, as ml_dtypes.
  EXPECT_EQ(NarrowIntFromDouble(DType::kInt4, 7.99), 0x7);
  EXPECT_EQ(NarrowIntFromDouble(DType::kInt4, -8.9), 0x8);
  EXPECT_EQ(NarrowIntFromDouble(DType::kInt4, 8.0), 0x0);
  EXPECT_EQ(NarrowIntFromDouble(DType::kInt4, -9.0), 0x0);
  EXPECT_EQ(NarrowIntFromDouble(DType::kUInt4, 15.9), 0xf);
  EXPECT_EQ(NarrowIntFromDouble(DType::kUInt4, -1.0), 0x0);
  EXPECT_EQ(NarrowIntFromDouble(DType::kInt2, -2.5), 0x2);
  EXPECT_EQ(NarrowIntFromDouble(DType::kUInt2, kNaN), 0x0);
  EXPECT_EQ(NarrowIntMin(DType::kInt2), -2);
  EXPECT_EQ(NarrowIntMax(DType::kUInt4), 15);
}

TEST(Packing, ByteLayoutIsOnnxs) {
  // i4 [1, -1, 7]: low nibble first, the odd element's high nibble zero.
  Tensor a = Tensor::Alloc(DType::kInt4, {3});
  ASSERT_EQ(a.nbytes(), 2u);
  const int8_t vals[3] = {1, -1, 7};
  for (int i = 0; i < 3; ++i) StoreSmallBits(a.mutable_raw(), DType::kInt4, i, NarrowIntWrap(DType::kInt4, vals[i]));
  EXPECT_EQ(a.data<uint8_t>()[0], 0xf1);
  EXPECT_EQ(a.data<uint8_t>()[1], 0x07);
  // u2 [0, 1, 2, 3] -> 0b11'10'01'00.
  Tensor b = Tensor::Alloc(DType::kUInt2, {4});
  for (int i = 0; i < 4; ++i) StoreSmallBits(b.mutable_raw(), DType::kUInt2, i, static_cast<uint8_t>(i));
  EXPECT_EQ(b.nbytes(), 1u);
  EXPECT_EQ(b.data<uint8_t>()[0], 0xe4);
  // f6: four elements in three bytes, a little-endian bit stream (as onnx's _pack_6bit).
  Tensor c = Tensor::Alloc(DType::kFloat6E2M3, {4});
  ASSERT_EQ(c.nbytes(), 3u);
  const uint8_t codes[4] = {0x3f, 0x01, 0x2a, 0x15};
  for (int i = 0; i < 4; ++i) StoreSmallBits(c.mutable_raw(), DType::kFloat6E2M3, i, codes[i]);
  const auto* p = c.data<uint8_t>();
  EXPECT_EQ(p[0], 0x3f | (0x01 & 3) << 6);
  EXPECT_EQ(p[1], (0x01 >> 2) | (0x2a & 0xf) << 4);
  EXPECT_EQ(p[2], (0x2a >> 4) | 0x15 << 2);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(LoadSmallBits(p, DType::kFloat6E2M3, i), codes[i]);
}

TEST(Packing, StoreLeavesNeighboursAlone) {
  for (DType t : {DType::kInt4, DType::kUInt2, DType::kFloat6E3M2, DType::kFloat8E5M2}) {
    const int bits = DTypeBits(t);
    const int n = 13;
    Tensor x = Tensor::Alloc(t, {n});
    ASSERT_EQ(x.nbytes(), (static_cast<size_t>(n) * bits + 7) / 8) << DTypeName(t);
    for (int round = 0; round < 2; ++round)  // the second round overwrites set bits
      for (int i = 0; i < n; ++i)
        StoreSmallBits(x.mutable_raw(), t, i, static_cast<uint8_t>((i * 7 + round * 3) & ((1 << bits) - 1)));
    for (int i = 0; i < n; ++i)
      EXPECT_EQ(LoadSmallBits(x.raw(), t, i), (i * 7 + 3) & ((1 << bits) - 1)) << DTypeName(t) << " " << i;
  }
}

TEST(DTypeBytes, PackedTypesRoundUp) {
  EXPECT_EQ(DTypeBytes(DType::kInt4, 5), 3u);
  EXPECT_EQ(DTypeBytes(DType::kUInt2, 5), 2u);
  EXPECT_EQ(DTypeBytes(DType::kFloat6E2M3, 5), 4u);
  EXPECT_EQ(DTypeBytes(DType::kFloat8E4M3FN, 5), 5u);
  EXPECT_EQ(DTypeBytes(DType::kFloat32, 5), 20u);
  EXPECT_EQ(DTypeBytes(DType::kInt4, 0), 0u);
  EXPECT_EQ(DTypeSize(DType::kInt4), 0u);  // no whole-byte element size
  EXPECT_EQ(DTypeBits(DType::kInt4), 4);
  EXPECT_EQ(DTypeBits(DType::kFloat6E3M2), 6);
  EXPECT_TRUE(IsPackedDType(DType::kFloat4E2M1));
  EXPECT_FALSE(IsPackedDType(DType::kFloat8E8M0));
  EXPECT_TRUE(IsStorableDType(DType::kInt2));
  EXPECT_FALSE(IsStorableDType(DType::kComplex64));
  EXPECT_STREQ(DTypeName(DType::kUInt2), "u2");
  EXPECT_EQ(DTypeFromName("f6e3m2"), DType::kFloat6E3M2);
  EXPECT_EQ(FirstOpsetWithType(DType::kInt2), 25);
  EXPECT_EQ(FirstOpsetWithType(DType::kFloat32), 0);
}

// ---- CastTensor through whole tensors -----------------------------------------------

Tensor F32(const std::vector<float>& v) {
  return Tensor::FromVector(DType::kFloat32, v, {static_cast<int64_t>(v.size())});
}

std::vector<double> Values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(ElementAsDouble(t, i));
  return v;
}

TEST(CastSmall, FloatToInt4AndBack) {
  // Values of onnx's test_cast_FLOAT_to_INT4: out-of-range floats give 0.
  Tensor x = F32({-9, -8, -1, 0, 7, 8, 15, 2.7f, -2.7f});
  auto y = CastTensor(x, DType::kInt4);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y->nbytes(), 5u);
  EXPECT_EQ(Values(*y), (std::vector<double>{0, -8, -1, 0, 7, 0, 0, 2, -2}));
  auto back = CastTensor(*y, DType::kInt8);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->data<int8_t>()[1], -8);
  // Integers wrap: int32 17 -> int4 1, -9 -> 7; int4 -8 -> uint8 248 (as NumPy's astype).
  auto w = CastTensor(Tensor::FromVector(DType::kInt32, std::vector<int32_t>{17, -9}, {2}), DType::kInt4);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(Values(*w), (std::vector<double>{1, 7}));
  auto u8 = CastTensor(*y, DType::kUInt8);
  ASSERT_TRUE(u8.ok());
  EXPECT_EQ(u8->data<uint8_t>()[1], 248);
  auto u4 = CastTensor(*y, DType::kUInt4);  // between packed types
  ASSERT_TRUE(u4.ok());
  EXPECT_EQ(ElementAsInt64(*u4, 1), 8);
}

TEST(CastSmall, SaturateAndNonSaturateFloat8) {
  Tensor x = F32({1e6f, -1e6f, std::numeric_limits<float>::infinity(), std::nanf(""), 0.47f});
  CastOptions no_sat;
  no_sat.saturate = false;
  auto sat = CastTensor(x, DType::kFloat8E4M3FN);
  auto nosat = CastTensor(x, DType::kFloat8E4M3FN, no_sat);
  ASSERT_TRUE(sat.ok() && nosat.ok());
  const auto* s = sat->data<uint8_t>();
  const auto* n = nosat->data<uint8_t>();
  EXPECT_EQ(s[0], 0x7e);
  EXPECT_EQ(s[1], 0xfe);
  EXPECT_EQ(s[2], 0x7e);
  EXPECT_EQ(n[0], 0x7f);
  EXPECT_EQ(n[2], 0x7f);
  EXPECT_EQ(s[3], 0x7f);
  EXPECT_EQ(ElementAsDouble(*sat, 4), 0.46875);  // 0.47 to nearest: 1.875 * 2^-2
  auto e5 = CastTensor(x, DType::kFloat8E5M2, no_sat);
  ASSERT_TRUE(e5.ok());
  EXPECT_EQ(ElementAsDouble(*e5, 0), kInf);
  auto f16 = CastTensor(*sat, DType::kFloat16);  // float8 -> float16 is exact
  ASSERT_TRUE(f16.ok());
  EXPECT_EQ(static_cast<float>(f16->data<Half>()[0]), 448.f);
  EXPECT_TRUE(std::isnan(static_cast<float>(f16->data<Half>()[3])));
}

TEST(CastSmall, E8M0RoundModesAndFloat4) {
  Tensor x = F32({0.f, 0.124f, 1.1f, 8.f});
  CastOptions down;
  down.round_mode = E8M0Rounding::kDown;
  auto up = CastTensor(x, DType::kFloat8E8M0);
  auto dn = CastTensor(x, DType::kFloat8E8M0, down);
  ASSERT_TRUE(up.ok() && dn.ok());
  EXPECT_EQ(Values(*up), (std::vector<double>{std::ldexp(1.0, -127), 0.125, 2, 8}));
  EXPECT_EQ(Values(*dn), (std::vector<double>{std::ldexp(1.0, -127), 0.0625, 1, 8}));
  auto f4 = CastTensor(F32({0.48f, 0.25f, -3.5f, 9.f, std::nanf("")}), DType::kFloat4E2M1);
  ASSERT_TRUE(f4.ok());
  EXPECT_EQ(f4->nbytes(), 3u);
  EXPECT_EQ(f4->data<uint8_t>()[0], 0x01);  // 0.5 | 0 << 4
  EXPECT_EQ(f4->data<uint8_t>()[1], 0x7e);  // -4 | 6 << 4
  EXPECT_EQ(f4->data<uint8_t>()[2], 0x08);  // NaN -> -0
  auto b = CastTensor(*f4, DType::kBool);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data<bool>()[0], true);
  EXPECT_EQ(b->data<bool>()[1], false);
  auto from_bool = CastTensor(*b, DType::kFloat8E5M2FNUZ);
  ASSERT_TRUE(from_bool.ok());
  EXPECT_EQ(ElementAsDouble(*from_bool, 0), 1.0);
}

TEST(CastSmall, UnsupportedPairsSayWhich) {
  Tensor x = F32({1.f});
  auto s = CastTensor(x, DType::kComplex128);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(s.status().ToString().find("cast to c128"), std::string::npos) << s.status().ToString();
  auto c = CastTensor(x, DType::kComplex64);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().ToString().find("c64"), std::string::npos);
}

TEST(TensorSmall, ZerosAndCloneOfPackedTypes) {
  auto z = Tensor::Zeros(DType::kUInt4, {3, 3});
  ASSERT_TRUE(z.ok()) << z.status().ToString();
  EXPECT_EQ(z->nbytes(), 5u);
  StoreSmallBits(z->mutable_raw(), DType::kUInt4, 8, 0xa);
  Tensor c = z->Clone();
  EXPECT_EQ(ElementAsInt64(c, 8), 10);
  EXPECT_EQ(ElementAsInt64(c, 7), 0);
  EXPECT_FALSE(Tensor::Zeros(DType::kInt2, {int64_t{1} << 41}).ok());  // over the 64 GiB cap
}

TEST(TensorSmall, NpyWidensExactly) {
  Tensor i4 = CastTensor(F32({-8, 7, 3}), DType::kInt4).value();
  auto a = ParseNpy(SerializeNpy(i4), "mem");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->dtype(), DType::kInt8);
  EXPECT_EQ(Values(*a), (std::vector<double>{-8, 7, 3}));
  Tensor u2 = CastTensor(F32({3, 1}), DType::kUInt2).value();
  auto b = ParseNpy(SerializeNpy(u2), "mem");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->dtype(), DType::kUInt8);
  EXPECT_EQ(Values(*b), (std::vector<double>{3, 1}));
  Tensor f8 = CastTensor(F32({448, -0.001953125f}), DType::kFloat8E4M3FN).value();
  auto c = ParseNpy(SerializeNpy(f8), "mem");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->dtype(), DType::kFloat32);
  EXPECT_EQ(Values(*c), (std::vector<double>{448, -0.001953125}));
}

}  // namespace
}  // namespace sampan
