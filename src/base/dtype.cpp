#include "base/dtype.h"

namespace sampan {

namespace {
struct DTypeInfo {
  DType type;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kInfos[] = {
    {DType::kUndefined, "undefined", 0}, {DType::kFloat32, "f32", 4},
    {DType::kUInt8, "u8", 1},            {DType::kInt8, "i8", 1},
    {DType::kUInt16, "u16", 2},          {DType::kInt16, "i16", 2},
    {DType::kInt32, "i32", 4},           {DType::kInt64, "i64", 8},
    {DType::kString, "string", 0},       {DType::kBool, "bool", 1},
    {DType::kFloat16, "f16", 2},         {DType::kFloat64, "f64", 8},
    {DType::kUInt32, "u32", 4},          {DType::kUInt64, "u64", 8},
    {DType::kComplex64, "c64", 8},       {DType::kComplex128, "c128", 16},
    {DType::kBFloat16, "bf16", 2},       {DType::kFloat8E4M3FN, "f8e4m3fn", 1},
    {DType::kFloat8E4M3FNUZ, "f8e4m3fnuz", 1}, {DType::kFloat8E5M2, "f8e5m2", 1},
    {DType::kFloat8E5M2FNUZ, "f8e5m2fnuz", 1}, {DType::kUInt4, "u4", 0},
    {DType::kInt4, "i4", 0},             {DType::kFloat4E2M1, "f4e2m1", 0},
    {DType::kFloat8E8M0, "f8e8m0", 1},
};
}  // namespace

bool IsKnownDType(int32_t v) { return v >= 1 && v <= 24; }

size_t DTypeSize(DType t) {
  auto i = static_cast<size_t>(t);
  return i < std::size(kInfos) ? kInfos[i].size : 0;
}

const char* DTypeName(DType t) {
  auto i = static_cast<size_t>(t);
  return i < std::size(kInfos) ? kInfos[i].name : "invalid";
}

DType DTypeFromName(std::string_view name) {
  for (const auto& info : kInfos)
    if (name == info.name) return info.type;
  return DType::kUndefined;
}

bool IsStorableDType(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kUInt8: case DType::kInt8: case DType::kUInt16:
    case DType::kInt16: case DType::kInt32: case DType::kInt64: case DType::kBool:
    case DType::kFloat16: case DType::kFloat64: case DType::kUInt32: case DType::kUInt64:
    case DType::kBFloat16:
      return true;
    default:
      return false;
  }
}

bool IsFloatDType(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16 || t == DType::kFloat64;
}

bool IsIntegerDType(DType t) {
  switch (t) {
    case DType::kUInt8: case DType::kInt8: case DType::kUInt16: case DType::kInt16:
    case DType::kInt32: case DType::kInt64: case DType::kUInt32: case DType::kUInt64:
      return true;
    default:
      return false;
  }
}

bool IsSignedDType(DType t) {
  return t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 || t == DType::kInt64 ||
         IsFloatDType(t);
}

}  // namespace sampan
