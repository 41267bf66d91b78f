// LayerNormalization / RMSNormalization over the trailing `n` elements of each
// of `rows` rows: y = (x - mean) / sqrt(var + eps) * scale + bias (float math),
// optionally of a sum x + residual (sampan::AddLayerNorm: BERT's post-LN blocks).
// Rows of up to 32 x 8 16-byte vectors (2048 halves, 1024 floats) are held in the
// registers of one warp (one read, shuffle reductions); longer or unaligned rows
// take one block per row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernel_types.h"
#include "backends/cuda/quantize.h"

namespace sampan::cuda {

//! scale and bias (bias may be null) hold n elements of x's type.
cudaError_t LaunchLayerNorm(FloatType t, const void* x, const void* scale, const void* bias, void* y, int64_t rows,
                            int64_t n, float eps, bool rms, cudaStream_t stream, const Float8Out& q = {});

//! y = LayerNorm(x + residual): the sum is rounded to the type first (as Add then
//! LayerNormalization give). Row r of the output reads row r % x_rows of x and row
//! r % residual_rows of residual (a residual broadcast over leading dims).
cudaError_t LaunchAddLayerNorm(FloatType t, const void* x, int64_t x_rows, const void* residual, int64_t residual_rows,
                               const void* scale, const void* bias, void* y, int64_t rows, int64_t n, float eps,
                               cudaStream_t stream, const Float8Out& q = {});

}  // namespace sampan::cuda
