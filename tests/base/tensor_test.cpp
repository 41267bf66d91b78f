#include "base/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "base/dtype.h"

namespace sampan {
namespace {

TEST(DType, NamesRoundTrip) {
  int32_t last = 1;
  while (IsKnownDType(last + 1)) ++last;
  EXPECT_GE(last, 23);
  for (int32_t v = 1; v <= last; ++v) {
    const DType t = static_cast<DType>(v);
    EXPECT_TRUE(IsKnownDType(v));
    EXPECT_EQ(DTypeFromName(DTypeName(t)), t) << DTypeName(t);
  }
  EXPECT_FALSE(IsKnownDType(0));
  EXPECT_FALSE(IsKnownDType(last + 1));
  EXPECT_FALSE(IsKnownDType(1000));
  EXPECT_FALSE(IsKnownDType(-1));
  EXPECT_EQ(DTypeFromName("float32"), DType::kUndefined);
  EXPECT_STREQ(DTypeName(static_cast<DType>(99)), "invalid");
  EXPECT_EQ(DTypeSize(DType::kFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kInt64), 8u);
  EXPECT_EQ(DTypeSize(DType::kString), 0u);
  EXPECT_TRUE(IsStorableDType(DType::kBFloat16));
  EXPECT_TRUE(IsStorableDType(DType::kString));  // elements are std::string objects (strings_test.cpp)
  EXPECT_TRUE(IsStorableDType(DType::kFloat8E4M3FN));
  EXPECT_FALSE(IsStorableDType(DType::kComplex64));
  EXPECT_TRUE(IsSignedDType(DType::kInt8));
  EXPECT_FALSE(IsSignedDType(DType::kUInt8));
}

TEST(Tensor, ZerosAndShape) {
  auto t = Tensor::Zeros(DType::kFloat32, {2, 3});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->numel(), 6);
  EXPECT_EQ(t->nbytes(), 24u);
  EXPECT_EQ(t->rank(), 2);
  EXPECT_EQ(t->Describe(), "f32[2,3]");
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t->data<float>()[i], 0.f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw()) % 64, 0u);
  auto scalar = Tensor::Zeros(DType::kInt64, {});
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ(scalar->numel(), 1);
  auto empty = Tensor::Zeros(DType::kInt64, {3, 0});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->numel(), 0);
  EXPECT_FALSE(Tensor().defined());
}

TEST(Tensor, ZerosRejectsBadRequests) {
  EXPECT_EQ(Tensor::Zeros(DType::kComplex64, {2}).status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(Tensor::Zeros(DType::kString, {int64_t{1} << 40}).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(Tensor::Zeros(DType::kFloat32, {2, -1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Tensor::Zeros(DType::kFloat32, {int64_t{1} << 32, int64_t{1} << 32}).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_FALSE(CheckShape({int64_t{1} << 62, 4}).ok());  // would overflow int64
  EXPECT_TRUE(CheckShape({0, int64_t{1} << 62}).ok());
}

TEST(Tensor, CopiesShareCloneCopies) {
  Tensor a = Tensor::FromVector<float>(DType::kFloat32, {1, 2, 3, 4}, {4});
  Tensor shared = a;
  Tensor cloned = a.Clone();
  a.mutable_data<float>()[0] = 9;
  EXPECT_EQ(shared.data<float>()[0], 9);
  EXPECT_EQ(cloned.data<float>()[0], 1);
  Tensor r = a.Reshaped({2, 2});
  EXPECT_EQ(r.shape(), (Shape{2, 2}));
  EXPECT_EQ(r.raw(), a.raw());
}

TEST(Tensor, WrappedStorageIsCopiedOnWrite) {
  auto owner = std::make_shared<std::vector<int32_t>>(std::vector<int32_t>{5, 6});
  Tensor w = Tensor::Wrap(DType::kInt32, {2}, owner, owner->data());
  EXPECT_EQ(w.data<int32_t>()[1], 6);
  w.mutable_data<int32_t>()[1] = 7;
  EXPECT_EQ((*owner)[1], 6) << "wrapped memory must not be written";
  EXPECT_EQ(w.data<int32_t>()[1], 7);
}

TEST(Tensor, FromVectorConvertsElements) {
  Tensor h = Tensor::FromVector<float>(DType::kFloat16, {1.5f, -2.f}, {2});
  EXPECT_EQ(h.data<Half>()[0].bits, 0x3e00);
  Tensor b = Tensor::FromVector<int>(DType::kBool, {0, 3}, {2});
  EXPECT_FALSE(b.data<bool>()[0]);
  EXPECT_TRUE(b.data<bool>()[1]);
}

TEST(Tensor, ElementAccessAndInt64Vector) {
  Tensor t = Tensor::FromVector<int32_t>(DType::kInt32, {-3, 4}, {2});
  EXPECT_EQ(ElementAsInt64(t, 0), -3);
  EXPECT_EQ(ElementAsDouble(t, 1), 4.0);
  auto v = ToInt64Vector(t, "axes");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, (std::vector<int64_t>{-3, 4}));
  Tensor f = Tensor::FromVector<float>(DType::kFloat32, {1.f}, {1});
  auto bad = ToInt64Vector(f, "axes");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("axes must be an integer tensor"), std::string::npos);
}

TEST(Tensor, CastTensor) {
  Tensor f = Tensor::FromVector<float>(DType::kFloat32, {1.7f, -1.7f, 0.f, 300.f}, {4});
  auto i = CastTensor(f, DType::kInt32);
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(i->data<int32_t>()[0], 1);
  EXPECT_EQ(i->data<int32_t>()[1], -1);
  auto u8 = CastTensor(f, DType::kUInt8);
  ASSERT_TRUE(u8.ok());
  EXPECT_EQ(u8->data<uint8_t>()[3], 255);
  auto b = CastTensor(f, DType::kBool);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->data<bool>()[1]);
  EXPECT_FALSE(b->data<bool>()[2]);
  auto h = CastTensor(f, DType::kFloat16);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(static_cast<float>(h->data<Half>()[3]), 300.f);
  EXPECT_EQ(CastTensor(f, DType::kComplex64).status().code(), StatusCode::kUnsupported);
  auto same = CastTensor(f, DType::kFloat32);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->raw(), f.raw());
}

TEST(Tensor, DispatchDTypeRejectsUnstorable) {
  int calls = 0;
  EXPECT_TRUE(DispatchDType(DType::kUInt16, [&]<class T>() { calls += std::is_same_v<T, uint16_t>; }).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(DispatchDType(DType::kComplex64, [&]<class T>() { ++calls; }).code(), StatusCode::kUnsupported);
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace sampan
