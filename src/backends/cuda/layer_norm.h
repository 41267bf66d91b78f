// LayerNormalization / RMSNormalization over the trailing `n` elements of each
// of `rows` rows: y = (x - mean) / sqrt(var + eps) * scale + bias (float math).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernel_types.h"

namespace sampan::cuda {

//! scale and bias (bias may be null) hold n elements of x's type.
cudaError_t LaunchLayerNorm(FloatType t, const void* x, const void* scale, const void* bias, void* y, int64_t rows,
                            int64_t n, float eps, bool rms, cudaStream_t stream);

}  // namespace sampan::cuda
