// Element-wise kernels: binary ops with NumPy broadcasting, unary math and
// activations (the fused-op epilogues), for f32/f16/bf16 (math in float).
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/kernel_types.h"

namespace sampan::cuda {

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kPow, kMax, kMin, kPRelu };
enum class UnaryOp {
  kIdentity,
  kRelu,
  kSigmoid,
  kTanh,
  kExp,
  kLog,
  kSqrt,
  kNeg,
  kAbs,
  kErf,
  kReciprocal,
  kFloor,
  kCeil,
  kGelu,
  kGeluTanh,
  kSiLU,
  kHardSigmoid,
  kHardSwish,
  kLeakyRelu,
  kClip,
  kSoftplus,
  kElu,
  kSin,
  kCos,
  kSelu,
  kCelu,
  kSoftsign,
  kMish,
  kThresholdedRelu,
  kShrink,
  kSwish,
  kRound,
  kSign,
  kTan,
  kAsin,
  kAcos,
  kAtan,
  kSinh,
  kCosh,
  kAsinh,
  kAcosh,
  kAtanh,
  kScale,  //!< p0 * x (Mean's division)
};

//! out = a op b over `shape`; shape.stride[0] for a, [1] for b (0 where broadcast).
cudaError_t LaunchBinary(BinaryOp op, FloatType t, const void* a, const void* b, void* out, const StridedShape& shape,
                         cudaStream_t stream);
//! y = f(x) for n contiguous elements; p0/p1 are the op's parameters (Clip min/max, LeakyRelu alpha...).
cudaError_t LaunchUnary(UnaryOp op, FloatType t, const void* x, void* y, int64_t n, float p0, float p1,
                        cudaStream_t stream);

}  // namespace sampan::cuda
