// Softmax / LogSoftmax over the middle axis of an [outer, n, inner] view, with an
// optional pre-scale and additive mask (the attention op's softmax).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernel_types.h"

namespace sampan::cuda {

struct SoftmaxParams {
  int64_t outer = 1, n = 1, inner = 1;
  bool log = false;
  float scale = 1.f;           //!< applied to x before the mask
  const void* mask = nullptr;  //!< same type as x; element (o, j) at mask[o_off(o) + j * mask_j_stride]
  //! Mask addressing when inner == 1: row o = (b, q) with b = o / mask_rows_per_batch.
  int64_t mask_rows_per_batch = 1, mask_batch_stride = 0, mask_row_stride = 0, mask_col_stride = 1;
  int64_t mask_batch_div = 1;  //!< batch index of the mask = (o / rows_per_batch) / mask_batch_div
  int64_t mask_batch_mod = 1;  //!< ... and then % mask_batch_mod (broadcast over heads)
  //! Rows whose exponentials sum to 0 or NaN (all -inf, or a NaN logit) come out as zeros: the
  //! attention op's semantics (torch's NaN guard after a boolean-masked softmax). Row kernel only.
  bool zero_invalid_rows = false;
};

cudaError_t LaunchSoftmax(FloatType t, const void* x, void* y, const SoftmaxParams& p, cudaStream_t stream);

}  // namespace sampan::cuda
