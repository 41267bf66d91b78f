// Device arithmetic of QuantizeLinear shared by the quantize kernels (quantize.cu) and the
// kernels that write a quantized copy of their output (layer_norm.cu): the reference's rounding
// (ops/quantize.cpp) bit for bit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backends/cuda/quantize.h"

namespace sampan::cuda {

// Exact widening to float that keeps a NaN's sign (the hardware conversion makes a NaN the
// positive canonical one; the reference keeps the sign, and float8 NaN codes carry it).
__device__ __forceinline__ float Widen(float v) {
  return v;
}
__device__ __forceinline__ float Widen(__half v) {
  const unsigned b = __half_as_ushort(v);
  return (b & 0x7fffu) > 0x7c00u ? __uint_as_float((b & 0x8000u) << 16 | 0x7fc00000u) : __half2float(v);
}
__device__ __forceinline__ float Widen(__nv_bfloat16 v) {
  return __uint_as_float(static_cast<uint32_t>(__bfloat16_as_ushort(v)) << 16);
}

__device__ __forceinline__ float LoadScale(const void* p, QFloat t, int64_t i) {
  switch (t) {
    case QFloat::kF16:
      return Widen(static_cast<const __half*>(p)[i]);
    case QFloat::kBF16:
      return Widen(static_cast<const __nv_bfloat16*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

// v rounded to nearest even in type t; a NaN keeps its sign (as the reference's Half/BFloat16 do).
__device__ __forceinline__ float RoundTo(QFloat t, float v) {
  if (t == QFloat::kF32 || isnan(v)) return v;
  return t == QFloat::kF16 ? __half2float(__float2half_rn(v)) : __bfloat162float(__float2bfloat16_rn(v));
}

// The exact value of a float8 code (e4m3fn: only S.1111.111 is NaN; e5m2: the top byte of a half).
__device__ __forceinline__ float E4M3ToFloat(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t e = (b >> 3) & 15u, m = b & 7u;
  if (e == 15u && m == 7u) return __uint_as_float(sign | 0x7fc00000u);
  if (e == 0u) return __uint_as_float(sign | __float_as_uint(static_cast<float>(m) * 0.001953125f));  // m * 2^-9
  return __uint_as_float(sign | (e + 120u) << 23 | m << 20);
}
__device__ __forceinline__ float E5M2ToFloat(uint8_t b) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(static_cast<unsigned>(b) << 8)));
}

// q (already rounded to the quotient type) to float8 as SmallFloatFromDouble: round to nearest
// even with an unbounded exponent; past the largest finite value (e4m3fn 448: above the 464 tie,
// e5m2 57344: from the 61440 tie on) and +-inf give +-max when saturating, else NaN (e4m3fn) or
// inf (e5m2). The hardware conversion (satfinite) only sees values that round into range. A NaN
// quotient takes the sign the reference's x86 division gives it: the dividend's if it is NaN,
// else the divisor's, else (0/0, inf/inf: the default NaN) negative.
template <QType T>
__device__ __forceinline__ uint8_t ToFloat8(float q, bool saturate, float xp, float sp) {
  constexpr bool e4 = T == QType::kE4M3;
  constexpr uint8_t nan = e4 ? 0x7f : 0x7e, max = e4 ? 0x7e : 0x7b, inf = 0x7c;
  if (isnan(q)) {
    const bool neg = isnan(xp) ? signbit(xp) : isnan(sp) ? signbit(sp) : true;
    return static_cast<uint8_t>((neg ? 0x80 : 0) | nan);
  }
  const uint8_t sign = signbit(q) ? 0x80 : 0;
  const float a = fabsf(q);
  if (e4 ? a > 464.f : a >= 61440.f) return static_cast<uint8_t>(sign | (saturate ? max : e4 ? nan : inf));
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, e4 ? __NV_E4M3 : __NV_E5M2));
}

//! The reciprocal DivRn takes for scale s: RN(1 / s) for 2^-64 <= |s| <= 2^64, else 0 (DivRn
//! then divides). The bound keeps the FMA remainder normal wherever the quotient can be a nonzero
//! float8 (|x / s| >= 2^-24): below, every code is +-0 whatever the last bit.
__device__ __forceinline__ float DivRnReciprocal(float s) {
  return fabsf(s) >= 0x1p-64f && fabsf(s) <= 0x1p64f ? __frcp_rn(s) : 0.f;
}

//! x / s correctly rounded, from inv = DivRnReciprocal(s) (or the host's 1.f / s under the same
//! bound): the product is within an ulp of the quotient and one FMA remainder corrects it
//! (Markstein), three instructions where __fdiv_rn takes a dozen. The product is kept where it
//! is not finite (x out of range) or zero (so -0 keeps its sign); inv 0 divides.
__device__ __forceinline__ float DivRn(float x, float s, float inv) {
  if (inv == 0.f) return __fdiv_rn(x, s);
  const float q0 = x * inv;
  const float q = fmaf(fmaf(-q0, s, x), inv, q0);
  return isfinite(q0) && q0 != 0.f ? q : q0;
}

//! QuantizeLinear of one value x of type X to float8 T with a scale s already rounded to the
//! quotient type `prec` (inv = RN(1 / s)): round_p(round_p(x) / s), then ToFloat8. Saturating
//! conversions of numbers take the hardware's satfinite conversion, which rounds and clamps as
//! ToFloat8 does (+-inf and values past the largest finite one give +-max); NaN quotients and
//! non-saturating ones take ToFloat8.
template <QType T, class X>
__device__ __forceinline__ uint8_t QuantizeToFloat8(X x, float s, float inv, QFloat prec, bool saturate) {
  const float xp = RoundTo(prec, Widen(x));
  const float q = RoundTo(prec, DivRn(xp, s, inv));
  if (saturate && !isnan(q))
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, T == QType::kE4M3 ? __NV_E4M3 : __NV_E5M2));
  return ToFloat8<T>(q, saturate, xp, s);
}

//! The vector form of QuantizeToFloat8 for saturating conversions: the float8 codes of two
//! values (x as widened to float and rounded to the quotient type) in one register, low byte
//! first: two FMA-corrected quotients, one packed rounding to f16 (bf16) where that is the
//! quotient type, one packed satfinite conversion. A NaN quotient (x or the scale NaN, 0 / 0)
//! sets `special`: the caller then quantizes those values with QuantizeToFloat8, which gives the
//! reference's NaN sign.
template <QType T>
__device__ __forceinline__ uint16_t QuantizePairToFloat8(float x0, float x1, float s, float inv, QFloat prec,
                                                         bool& special) {
  constexpr __nv_fp8_interpretation_t kKind = T == QType::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  float q0 = DivRn(x0, s, inv), q1 = DivRn(x1, s, inv);
  special |= isnan(q0) || isnan(q1);
  if (prec == QFloat::kF16)
    return __nv_cvt_halfraw2_to_fp8x2(static_cast<__half2_raw>(__floats2half2_rn(q0, q1)), __NV_SATFINITE, kKind);
  if (prec == QFloat::kBF16) {
    q0 = RoundTo(prec, q0);
    q1 = RoundTo(prec, q1);
  }
  return __nv_cvt_float2_to_fp8x2(make_float2(q0, q1), __NV_SATFINITE, kKind);
}

}  // namespace sampan::cuda
