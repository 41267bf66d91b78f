// Element types. The numeric values are ONNX's TensorProto.DataType, so a
// value read from a model converts with a cast after IsKnownDType().
//
// Sub-byte types are stored packed as ONNX stores them: element i occupies bits
// [i*b, i*b + b) of a little-endian bit stream (b = DTypeBits), so 4-bit types
// hold two elements a byte (the first in the low nibble), 2-bit types four, and
// 6-bit types four in three bytes. A tensor's byte count is DTypeBytes().
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
  kUInt2 = 25,
  kInt2 = 26,
  kFloat6E2M3 = 27,
  kFloat6E3M2 = 28,
  // ONNX's non-tensor types, held in a Tensor as a list of tensors (base/tensor.h). Internal
  // values, not TensorProto.DataType ones: IsKnownDType is false for them.
  kSequence = 64,
  kOptional = 65,
};

//! True for values 1..28 of TensorProto.DataType (every element type of ONNX IR 14).
bool IsKnownDType(int32_t v);
//! Bytes per element; 0 for types without a whole byte size (string, and the packed 2/4/6-bit types).
size_t DTypeSize(DType t);
//! Bits per element: 8 * DTypeSize, or 2, 4, 6 for packed types; 0 for string.
int DTypeBits(DType t);
//! Bytes holding `numel` elements (packed types round up to whole bytes); 0 for string.
size_t DTypeBytes(DType t, int64_t numel);
//! Short name used by the IR text form and messages: f32, f16, bf16, i64, bool, f8e4m3fn, i4...
const char* DTypeName(DType t);
//! Inverse of DTypeName; kUndefined when unknown.
DType DTypeFromName(std::string_view name);
//! Types whose tensors Sampan can hold (complex cannot). A string tensor holds std::string
//! elements (UTF-8 bytes): DTypeSize/DTypeBytes are 0 for it, it never lives in an arena, and
//! only ops that declare so (OpDef::strings) take or produce it.
bool IsStorableDType(DType t);
//! Element types whose elements are objects, never arena bytes: string, sequence, optional.
bool IsObjectDType(DType t);
//! Types stored several elements to a byte: u4, i4, f4e2m1, u2, i2, f6e2m3, f6e3m2.
bool IsPackedDType(DType t);
//! Low-precision float storage types: the float8 family (e8m0 included), f4e2m1, f6e2m3, f6e3m2.
//! Kernels convert them through float; only Cast, CastLike, QuantizeLinear and DequantizeLinear compute on them.
bool IsSmallFloatDType(DType t);
//! The 2- and 4-bit integers: u4, i4, u2, i2.
bool IsNarrowIntegerDType(DType t);
bool IsFloatDType(DType t);    //!< f16, bf16, f32, f64
bool IsIntegerDType(DType t);  //!< signed or unsigned, 8..64 bit
bool IsSignedDType(DType t);

}  // namespace sampan
