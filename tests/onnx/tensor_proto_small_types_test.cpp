// TensorProto -> Tensor for float8, float4, float6, e8m0 and 2/4-bit types: raw_data (packed as
// onnx packs), int32_data (packed bytes for 2/4-bit types, one code an entry otherwise), and
// truncated data refused with an error that names the tensor.
#include <gtest/gtest.h>

#include "base/small_types.h"
#include "onnx/importer.h"
#include "onnx/onnx_pb.h"

namespace sampan::onnx_import {
namespace {

// The system's onnx.proto may predate these types: data_type is set from Sampan's DType (the same numbers).
onnx::TensorProto Proto(DType type, std::vector<int64_t> dims) {
  onnx::TensorProto t;
  t.set_name("w");
  t.set_data_type(static_cast<int>(type));
  for (int64_t d : dims) t.add_dims(d);
  return t;
}

std::vector<double> Values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(ElementAsDouble(t, i));
  return v;
}

TEST(TensorProtoSmallTypes, Int4RawAndInt32Data) {
  // [1, -1, 7, -8, 0]: bytes 0xf1, 0x87, 0x00 (low nibble first; the last high nibble padding).
  onnx::TensorProto raw = Proto(DType::kInt4, {5});
  raw.set_raw_data(std::string("\xf1\x87\xf0", 3));  // padding bits set: must be ignored
  auto a = TensorFromProto(raw, "", "initializer 'w'");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->dtype(), DType::kInt4);
  EXPECT_EQ(a->nbytes(), 3u);
  EXPECT_EQ(Values(*a), (std::vector<double>{1, -1, 7, -8, 0}));
  EXPECT_EQ(a->data<uint8_t>()[2], 0x00);  // padding cleared
  onnx::TensorProto i32 = Proto(DType::kInt4, {5});
  for (int b : {0xf1, 0x87, 0x00}) i32.add_int32_data(b);
  auto b = TensorFromProto(i32, "", "initializer 'w'");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(Values(*b), Values(*a));
  onnx::TensorProto u2 = Proto(DType::kUInt2, {2, 3});
  u2.add_int32_data(0xe4);  // 0 1 2 3
  u2.add_int32_data(0x0b);  // 3 2
  auto c = TensorFromProto(u2, "", "x");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(Values(*c), (std::vector<double>{0, 1, 2, 3, 3, 2}));
}

TEST(TensorProtoSmallTypes, Float8Float6AndE8M0) {
  onnx::TensorProto f8 = Proto(DType::kFloat8E4M3FN, {3});
  for (int b : {0x38, 0x7e, 0xc0}) f8.add_int32_data(b);
  auto a = TensorFromProto(f8, "", "x");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(Values(*a), (std::vector<double>{1, 448, -2}));
  onnx::TensorProto e8 = Proto(DType::kFloat8E8M0, {2});
  e8.set_raw_data(std::string("\x7f\x82", 2));
  auto b = TensorFromProto(e8, "", "x");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(Values(*b), (std::vector<double>{1, 8}));
  // float6: int32_data holds one 6-bit code an entry; raw_data the packed bit stream.
  onnx::TensorProto f6 = Proto(DType::kFloat6E3M2, {2});
  f6.add_int32_data(0x0c);  // 1.0
  f6.add_int32_data(0x3f);  // -28
  auto c = TensorFromProto(f6, "", "x");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->nbytes(), 2u);
  EXPECT_EQ(Values(*c), (std::vector<double>{1, -28}));
  onnx::TensorProto f6raw = Proto(DType::kFloat6E3M2, {2});
  f6raw.set_raw_data(std::string("\xcc\x0f", 2));  // 0x0c | 0x3f << 6
  auto d = TensorFromProto(f6raw, "", "x");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(Values(*d), Values(*c));
}

TEST(TensorProtoSmallTypes, TruncatedPackedDataNamesTheTensor) {
  onnx::TensorProto f4 = Proto(DType::kFloat4E2M1, {2, 3});  // 6 elements: 3 bytes
  f4.set_raw_data(std::string("\x12\x34", 2));
  auto a = TensorFromProto(f4, "", "initializer 3 'w'");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  const std::string msg = a.status().ToString();
  EXPECT_NE(
      msg.find("initializer 3 'w': raw_data has 2 bytes but f4e2m1[2,3] needs 3 (f4e2m1 packs 2 elements a byte)"),
      std::string::npos)
      << msg;
  onnx::TensorProto i4 = Proto(DType::kInt4, {5});
  for (int b : {1, 2}) i4.add_int32_data(b);
  auto b = TensorFromProto(i4, "", "initializer 'q'");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().ToString().find("int32_data holds 2 packed bytes but i4[5] needs 3"), std::string::npos)
      << b.status().ToString();
  onnx::TensorProto f8 = Proto(DType::kFloat8E5M2, {4});
  f8.add_int32_data(1);
  auto c = TensorFromProto(f8, "", "x");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().ToString().find("int32_data holds 1 values but the dims need 4"), std::string::npos);
  onnx::TensorProto big = Proto(DType::kUInt2, {9});  // 3 bytes, one too many
  big.set_raw_data(std::string(4, '\0'));
  EXPECT_FALSE(TensorFromProto(big, "", "x").ok());
}

}  // namespace
}  // namespace sampan::onnx_import
