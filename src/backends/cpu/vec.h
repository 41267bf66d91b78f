// Loop bodies our kernels share, written so the compiler vectorises them. vec.cpp
// compiles each three times (baseline x86-64, AVX2+FMA, AVX-512) and picks one per call
// by the instruction set the backend runs (isa.h: SP_ISA_DISPATCH, SAMPAN_CPU_ISA).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace sampan::cpu::vec {

//! exp(x) in float, branch-free (vectorisable): Cody-Waite range reduction and a
//! degree-6 polynomial; relative error ~2 ulp; saturates outside [-87, 88].
// Always inlined: a call would keep the loops around it from vectorising.
__attribute__((always_inline)) inline float Exp(float x) {
  x = x < -87.33654f ? -87.33654f : (x > 88.72283f ? 88.72283f : x);
  // n = x / ln 2 rounded to the nearest integer by adding and subtracting 1.5 * 2^23: floorf
  // kept GCC from vectorising any loop calling this (scalar vrndscaless without
  // -fno-trapping-math; a Sigmoid over 409,600 values took 0.63 ms on AVX-512, 1.5 ns each).
  const float t = x * 1.44269504088896341f;
  const float n = (t + 12582912.f) - 12582912.f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(e);
}

__attribute__((always_inline)) inline float Sigmoid(float x) {
  return 1.f / (1.f + Exp(-x));
}

// Row kernels (defined in vec.cpp with target clones).
void ExpInPlace(float* x, int64_t n);
//! y = softmax(x) over n contiguous values.
void SoftmaxRow(const float* x, float* y, int64_t n);
//! y = (x - mean) * rstd * scale + bias over n values (bias may be null).
void LayerNormRow(const float* x, const float* scale, const float* bias, float eps, float* y, int64_t n);
//! y = LayerNorm(a + b) over n values, the sum rounded to float first (sampan::AddLayerNorm's
//! row; bias may be null). y must not overlap a or b.
void AddLayerNormRow(const float* a, const float* b, const float* scale, const float* bias, float eps, float* y,
                     int64_t n);
//! Attention row: s = softmax(s * scale + mask) with mask[j * mask_stride] (mask may be null);
//! a row whose softmax is undefined (every score -inf, or a NaN) becomes zeros, as sampan::Attention says.
void AttentionSoftmaxRow(float* s, int64_t n, float scale, const float* mask, int64_t mask_stride);
//! Attention scores of up to 4 query rows: s[r][j] = sum_t q[r*qs + t*qt] * kt[t*sk + j]
//! (kt: K transposed, [D][Sk] contiguous; s: rows x sk contiguous).
void AttentionScores(const float* q, int64_t qs, int64_t qt, int rows, const float* kt, int64_t d, int64_t sk,
                     float* s);
//! Attention context of up to 4 rows: y[r*ys + c] = sum_j p[r*sk + j] * v[j*vs + c], c < dv
//! (rows of V and Y contiguous).
void AttentionContext(const float* p, int rows, int64_t sk, const float* v, int64_t vs, int64_t dv, float* y,
                      int64_t ys);
float Dot(const float* a, const float* b, int64_t n);

// Per-tensor quantization, ONNX's arithmetic: y = saturate(round_half_even(x / s) + zp) and
// x = float(q - zp) * s; QAdd is DequantizeLinear twice, Add, QuantizeLinear.
void QuantizeU8(const float* x, float s, int32_t zp, uint8_t* y, int64_t n);
void QuantizeS8(const float* x, float s, int32_t zp, int8_t* y, int64_t n);
void DequantizeU8(const uint8_t* q, float s, int32_t zp, float* x, int64_t n);
void DequantizeS8(const int8_t* q, float s, int32_t zp, float* x, int64_t n);
void QAddU8(const uint8_t* a, float sa, int32_t za, const uint8_t* b, float sb, int32_t zb, float sc, int32_t zc,
            uint8_t* c, int64_t n);
void QAddS8(const int8_t* a, float sa, int32_t za, const int8_t* b, float sb, int32_t zb, float sc, int32_t zc,
            int8_t* c, int64_t n);
//! y += a * x
void Axpy(float a, const float* x, float* y, int64_t n);

}  // namespace sampan::cpu::vec
