// Device helpers shared by the .cu files: float conversion of the storage
// types, launch geometry, warp reductions and the unary/activation math.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/elementwise.h"

namespace sampan::cuda {

constexpr int kThreads = 256;

inline unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? (blocks < 1 ? 1 : blocks) : 65535 * 8);
}

//! Whether every element index and operand offset of `s` (up to `operands` strides) fits in
//! 32 bits, so kernels can use 32-bit index arithmetic (64-bit division is several times slower).
inline bool FitsInt32(const StridedShape& s, int operands) {
  int64_t n = 1;
  for (int d = 0; d < s.rank; ++d) n *= s.dims[d];
  if (n >= (int64_t(1) << 31)) return false;
  for (int k = 0; k < operands; ++k) {
    int64_t off = 0;
    for (int d = 0; d < s.rank; ++d) off += (s.dims[d] - 1) * (s.stride[k][d] < 0 ? -s.stride[k][d] : s.stride[k][d]);
    if (off >= (int64_t(1) << 31)) return false;
  }
  return true;
}

//! Offsets of K operands for flat index i of s (outermost dim first), in index type I.
template <class I, int K>
__device__ __forceinline__ void StridedOffsets(const StridedShape& s, I i, I (&off)[K]) {
  for (int k = 0; k < K; ++k) off[k] = 0;
  for (int d = s.rank - 1; d >= 0; --d) {
    const I dim = static_cast<I>(s.dims[d]);
    const I c = i % dim;
    i /= dim;
    for (int k = 0; k < K; ++k) off[k] += c * static_cast<I>(s.stride[k][d]);
  }
}

__device__ __forceinline__ float ToFloat(float v) {
  return v;
}
__device__ __forceinline__ float ToFloat(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <class T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float ApplyUnary(UnaryOp op, float x, float p0, float p1) {
  switch (op) {
    case UnaryOp::kIdentity:
      return x;
    case UnaryOp::kRelu:
      return x > 0.f ? x : (isnan(x) ? x : 0.f);
    case UnaryOp::kSigmoid:
      return 1.f / (1.f + expf(-x));
    case UnaryOp::kTanh:
      return tanhf(x);
    case UnaryOp::kExp:
      return expf(x);
    case UnaryOp::kLog:
      return logf(x);
    case UnaryOp::kSqrt:
      return sqrtf(x);
    case UnaryOp::kNeg:
      return -x;
    case UnaryOp::kAbs:
      return fabsf(x);
    case UnaryOp::kErf:
      return erff(x);
    case UnaryOp::kReciprocal:
      return 1.f / x;
    case UnaryOp::kFloor:
      return floorf(x);
    case UnaryOp::kCeil:
      return ceilf(x);
    case UnaryOp::kGelu:
      return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case UnaryOp::kGeluTanh:
      return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case UnaryOp::kSiLU:
      return x / (1.f + expf(-x));
    case UnaryOp::kHardSigmoid:
      return fminf(1.f, fmaxf(0.f, p0 * x + p1));
    case UnaryOp::kHardSwish:
      return x * fminf(1.f, fmaxf(0.f, x / 6.f + 0.5f));
    case UnaryOp::kLeakyRelu:
      return x < 0.f ? p0 * x : x;
    case UnaryOp::kClip:
      return isnan(x) ? x : fminf(p1, fmaxf(p0, x));
    case UnaryOp::kSoftplus:
      return x > 20.f ? x : log1pf(expf(x));
    case UnaryOp::kElu:
      return x < 0.f ? p0 * (expf(x) - 1.f) : x;
    case UnaryOp::kSin:
      return sinf(x);
    case UnaryOp::kCos:
      return cosf(x);
    case UnaryOp::kSelu:
      return p1 * (x > 0.f ? x : p0 * expm1f(x));  // p0 alpha, p1 gamma
    case UnaryOp::kCelu:
      return fmaxf(0.f, x) + fminf(0.f, p0 * expm1f(x / p0));
    case UnaryOp::kSoftsign:
      return x / (1.f + fabsf(x));
    case UnaryOp::kMish:
      return x * tanhf(x > 0.f ? x + log1pf(expf(-x)) : log1pf(expf(x)));
    case UnaryOp::kThresholdedRelu:
      return x > p0 ? x : 0.f;
    case UnaryOp::kShrink:
      return x < -p1 ? x + p0 : (x > p1 ? x - p0 : 0.f);  // p0 bias, p1 lambd
    case UnaryOp::kSwish:
      return x / (1.f + expf(-p0 * x));
    case UnaryOp::kRound:
      return rintf(x);  // half to even, as std::nearbyint
    case UnaryOp::kSign:
      return x > 0.f ? 1.f : (x < 0.f ? -1.f : x);
    case UnaryOp::kTan:
      return tanf(x);
    case UnaryOp::kAsin:
      return asinf(x);
    case UnaryOp::kAcos:
      return acosf(x);
    case UnaryOp::kAtan:
      return atanf(x);
    case UnaryOp::kSinh:
      return sinhf(x);
    case UnaryOp::kCosh:
      return coshf(x);
    case UnaryOp::kAsinh:
      return asinhf(x);
    case UnaryOp::kAcosh:
      return acoshf(x);
    case UnaryOp::kAtanh:
      return atanhf(x);
    case UnaryOp::kScale:
      return p0 * x;
  }
  return x;
}

}  // namespace sampan::cuda
