// The element types kernels do not compute on directly: the float8 family (e4m3fn,
// e4m3fnuz, e5m2, e5m2fnuz, e8m0), float4e2m1, float6e2m3/e3m2 and the 2/4-bit
// integers. Conversions follow onnx's reference (ml_dtypes for astype, and
// onnx.numpy_helper for saturation and float8e8m0), bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

#include "base/dtype.h"
#include "base/tensor.h"

namespace sampan {

//! Bits of element i of a tensor's storage, for any type of at most 8 bits (packed or not).
inline uint8_t LoadSmallBits(const void* data, DType t, int64_t i) {
  const auto* p = static_cast<const uint8_t*>(data);
  const int bits = DTypeBits(t);
  if (bits == 8) return p[i];
  const auto bit = static_cast<uint64_t>(i) * static_cast<uint64_t>(bits);
  const uint64_t byte = bit / 8;
  const unsigned shift = bit % 8;
  unsigned v = p[byte] >> shift;
  if (shift + static_cast<unsigned>(bits) > 8) v |= static_cast<unsigned>(p[byte + 1]) << (8 - shift);
  return static_cast<uint8_t>(v & ((1u << bits) - 1));
}

//! Writes the low DTypeBits(t) bits of `v` as element i, leaving its neighbours in the same bytes alone.
inline void StoreSmallBits(void* data, DType t, int64_t i, uint8_t v) {
  auto* p = static_cast<uint8_t*>(data);
  const int bits = DTypeBits(t);
  if (bits == 8) {
    p[i] = v;
    return;
  }
  const unsigned mask = (1u << bits) - 1;
  const auto bit = static_cast<uint64_t>(i) * static_cast<uint64_t>(bits);
  const uint64_t byte = bit / 8;
  const unsigned shift = bit % 8;
  const unsigned val = v & mask;
  p[byte] = static_cast<uint8_t>((p[byte] & ~(mask << shift)) | (val << shift));
  if (shift + static_cast<unsigned>(bits) > 8) {
    const unsigned hi = shift + static_cast<unsigned>(bits) - 8;  // bits spilling into the next byte
    p[byte + 1] = static_cast<uint8_t>((p[byte + 1] & ~((1u << hi) - 1)) | (val >> (8 - shift)));
  }
}

//! The value of a small-float bit pattern (IsSmallFloatDType(t)); exact in double.
double SmallFloatToDouble(DType t, uint8_t bits);
//! Largest finite value of a small-float type.
double SmallFloatMax(DType t);
//! `v` rounded to nearest, ties to even, into small-float type t (not e8m0: ToFloat8E8M0).
//! Values past the largest finite one (after rounding) and +-inf become +-max when `saturate`;
//! otherwise inf (e5m2) or NaN (the fn/fnuz types). float4/float6 have neither and always saturate.
uint8_t SmallFloatFromDouble(DType t, double v, bool saturate);
//! float -> float8e8m0 as onnx.numpy_helper.to_float8e8m0: the exponent of |v|, rounded by `mode`
//! from the mantissa bits; NaN and inf give NaN (0xff); with `saturate` rounding stops at 2^127.
uint8_t ToFloat8E8M0(float v, bool saturate, E8M0Rounding mode);

//! Smallest / largest value of a 2/4-bit integer type.
int64_t NarrowIntMin(DType t);
int64_t NarrowIntMax(DType t);
//! The value of a 2/4-bit integer's bits (sign-extended for i4, i2).
int64_t NarrowIntValue(DType t, uint8_t bits);
//! An integer wrapped (two's complement) to a 2/4-bit type's bits.
inline uint8_t NarrowIntWrap(DType t, int64_t v) {
  return static_cast<uint8_t>(static_cast<uint64_t>(v) & ((1u << DTypeBits(t)) - 1));
}
//! A float converted to a 2/4-bit type as ml_dtypes does: truncated toward zero; NaN and values
//! whose truncation is out of range give 0.
uint8_t NarrowIntFromDouble(DType t, double v);

//! The first default-domain ONNX opset whose Cast and QuantizeLinear/DequantizeLinear accept t
//! (float8: 19, 4-bit integers: 21, float4: 23, e8m0: 24, 2-bit integers: 25, float6: 28); 0 for
//! the types every opset has.
int64_t FirstOpsetWithType(DType t);

}  // namespace sampan
