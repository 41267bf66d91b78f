#include "base/dtype.h"

namespace sampan {

namespace {
struct DTypeInfo {
  DType type;
  const char* name;
  int bits;  // 0: no fixed size (string)
};
constexpr DTypeInfo kInfos[] = {
    {DType::kUndefined, "undefined", 0},
    {DType::kFloat32, "f32", 32},
    {DType::kUInt8, "u8", 8},
    {DType::kInt8, "i8", 8},
    {DType::kUInt16, "u16", 16},
    {DType::kInt16, "i16", 16},
    {DType::kInt32, "i32", 32},
    {DType::kInt64, "i64", 64},
    {DType::kString, "string", 0},
    {DType::kBool, "bool", 8},
    {DType::kFloat16, "f16", 16},
    {DType::kFloat64, "f64", 64},
    {DType::kUInt32, "u32", 32},
    {DType::kUInt64, "u64", 64},
    {DType::kComplex64, "c64", 64},
    {DType::kComplex128, "c128", 128},
    {DType::kBFloat16, "bf16", 16},
    {DType::kFloat8E4M3FN, "f8e4m3fn", 8},
    {DType::kFloat8E4M3FNUZ, "f8e4m3fnuz", 8},
    {DType::kFloat8E5M2, "f8e5m2", 8},
    {DType::kFloat8E5M2FNUZ, "f8e5m2fnuz", 8},
    {DType::kUInt4, "u4", 4},
    {DType::kInt4, "i4", 4},
    {DType::kFloat4E2M1, "f4e2m1", 4},
    {DType::kFloat8E8M0, "f8e8m0", 8},
    {DType::kUInt2, "u2", 2},
    {DType::kInt2, "i2", 2},
    {DType::kFloat6E2M3, "f6e2m3", 6},
    {DType::kFloat6E3M2, "f6e3m2", 6},
};
static_assert(std::size(kInfos) == 29, "one entry per TensorProto.DataType value 0..28");

constexpr DTypeInfo kObjectInfos[] = {{DType::kSequence, "sequence", 0}, {DType::kOptional, "optional", 0}};

const DTypeInfo* Info(DType t) {
  auto i = static_cast<size_t>(t);
  if (i < std::size(kInfos)) return &kInfos[i];
  for (const auto& info : kObjectInfos)
    if (info.type == t) return &info;
  return nullptr;
}
}  // namespace

bool IsKnownDType(int32_t v) {
  return v >= 1 && v <= 28;
}

int DTypeBits(DType t) {
  const DTypeInfo* info = Info(t);
  return info ? info->bits : 0;
}

size_t DTypeSize(DType t) {
  const int bits = DTypeBits(t);
  return bits % 8 == 0 ? static_cast<size_t>(bits / 8) : 0;
}

size_t DTypeBytes(DType t, int64_t numel) {
  const auto bits = static_cast<size_t>(DTypeBits(t));
  const auto n = static_cast<size_t>(numel < 0 ? 0 : numel);
  return bits % 8 == 0 ? n * (bits / 8) : (n * bits + 7) / 8;
}

const char* DTypeName(DType t) {
  const DTypeInfo* info = Info(t);
  return info ? info->name : "invalid";
}

DType DTypeFromName(std::string_view name) {
  for (const auto& info : kInfos)
    if (name == info.name) return info.type;
  for (const auto& info : kObjectInfos)
    if (name == info.name) return info.type;
  return DType::kUndefined;
}

bool IsStorableDType(DType t) {
  switch (t) {
    case DType::kUndefined:
    case DType::kComplex64:
    case DType::kComplex128:
      return false;
    default:
      return Info(t) != nullptr;
  }
}

bool IsObjectDType(DType t) {
  return t == DType::kString || t == DType::kSequence || t == DType::kOptional;
}

bool IsPackedDType(DType t) {
  return !IsObjectDType(t) && DTypeBits(t) % 8 != 0;
}

bool IsSmallFloatDType(DType t) {
  switch (t) {
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ:
    case DType::kFloat8E8M0:
    case DType::kFloat4E2M1:
    case DType::kFloat6E2M3:
    case DType::kFloat6E3M2:
      return true;
    default:
      return false;
  }
}

bool IsNarrowIntegerDType(DType t) {
  return t == DType::kUInt4 || t == DType::kInt4 || t == DType::kUInt2 || t == DType::kInt2;
}

bool IsFloatDType(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat64;
}

bool IsIntegerDType(DType t) {
  switch (t) {
    case DType::kUInt8:
    case DType::kInt8:
    case DType::kUInt16:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUInt32:
    case DType::kUInt64:
      return true;
    default:
      return false;
  }
}

bool IsSignedDType(DType t) {
  return t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 || t == DType::kInt64 || IsFloatDType(t);
}

}  // namespace sampan
