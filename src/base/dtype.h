// Element types. The numeric values are ONNX's TensorProto.DataType, so a
// value read from a model converts with a cast after IsKnownDType().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sampan {

enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
  kBFloat16 = 16,
  kFloat8E4M3FN = 17,
  kFloat8E4M3FNUZ = 18,
  kFloat8E5M2 = 19,
  kFloat8E5M2FNUZ = 20,
  kUInt4 = 21,
  kInt4 = 22,
  kFloat4E2M1 = 23,
  kFloat8E8M0 = 24,
};

//! True for values 1..24 of TensorProto.DataType.
bool IsKnownDType(int32_t v);
//! Bytes per element; 0 for types without a fixed byte size (string, 4-bit).
size_t DTypeSize(DType t);
//! Short name used by the IR text form and messages: f32, f16, bf16, i64, bool...
const char* DTypeName(DType t);
//! Inverse of DTypeName; kUndefined when unknown.
DType DTypeFromName(std::string_view name);
//! Types whose tensors Sampan can store and compute with (string, complex, fp8, 4-bit are not).
bool IsStorableDType(DType t);
bool IsFloatDType(DType t);    //!< f16, bf16, f32, f64
bool IsIntegerDType(DType t);  //!< signed or unsigned, 8..64 bit
bool IsSignedDType(DType t);

}  // namespace sampan
