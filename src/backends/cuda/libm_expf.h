// The host's float exponential on the device, bit for bit: glibc's expf (2.28 and later, as its
// x86-64 FMA build runs it) reduces x to k/32 + r/32 (k whole, |r| <= 1/2), takes 2^(k/32) from a
// 32-entry table of doubles and 2^(r/32) from a cubic, all in double, and rounds once to float.
// CUDA's expf differs from it by an ulp on some inputs, which would move a sigmoid score (and so
// an NMS order or a threshold decision) off the reference's. Host and device compile this same
// code, so a CPU test can hold it against std::exp over many inputs.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace sampan::cuda {

//! The table: the doubles 2^(i/32) (correctly rounded), less i << 47 (the index's share of the
//! exponent, added back from the rounded k). For a __constant__ or host array: {SAMPAN_EXPF_TABLE}.
#define SAMPAN_EXPF_TABLE                                                                                            \
  0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull, 0x3fef72b83c7d517bull, \
      0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull, 0x3fef06fe0a31b715ull,                    \
      0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull, 0x3feebfdad5362a27ull,                    \
      0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull, 0x3feea09e667f3bcdull,                    \
      0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull, 0x3feeace5422aa0dbull,                    \
      0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull, 0x3feee89f995ad3adull,                    \
      0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull, 0x3fef5818dcfba487ull,                    \
      0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull

namespace libm_detail {

__host__ __device__ inline double Fma(double a, double b, double c) {
#ifdef __CUDA_ARCH__
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
__host__ __device__ inline double Mul(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
__host__ __device__ inline double Sub(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}

}  // namespace libm_detail

//! exp(x) as the host's expf rounds it; `table` holds {SAMPAN_EXPF_TABLE}.
__host__ __device__ inline float LibmExpf(float x, const uint64_t* table) {
  using namespace libm_detail;                            // NOLINT(google-build-using-namespace)
  constexpr double kInvLn2N = 0x1.71547652b82fep+0 * 32;  // 32 / ln 2
  constexpr double kShift = 0x1.8p+52;                    // rounds to a whole number when added
  // Minimax cubic of 2^(r/32) - 1 (coefficients of r^3, r^2 and r).
  constexpr double kC0 = 0x1.c6af84b912394p-5 / (32.0 * 32.0 * 32.0);
  constexpr double kC1 = 0x1.ebfce50fac4f3p-3 / (32.0 * 32.0);
  constexpr double kC2 = 0x1.62e42ff0c52d6p-1 / 32.0;
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint32_t top = (bits >> 20) & 0x7ff;
  if (top >= 0x42b) {  // |x| >= 88, or not finite
    if (bits == 0xff800000u) return 0.f;
    if (top >= 0x7f8) return x + x;
    if (x > 0x1.62e42ep6f) return INFINITY;  // overflows
    if (x < -0x1.9fe368p6f) return 0.f;      // underflows
  }
  const double xd = static_cast<double>(x);
  double kd = Fma(kInvLn2N, xd, kShift);
  uint64_t ki;
  std::memcpy(&ki, &kd, sizeof ki);
  kd = Sub(kd, kShift);
  const double r = Fma(kInvLn2N, xd, -kd);
  const uint64_t t = table[ki % 32] + (ki << 47);
  double s;
  std::memcpy(&s, &t, sizeof s);
  const double z = Fma(kC0, r, kC1);
  const double r2 = Mul(r, r);
  double y = Fma(kC2, r, 1.0);
  y = Fma(z, r2, y);
  return static_cast<float>(Mul(y, s));
}

}  // namespace sampan::cuda
