// 2-D pooling over NCHW or channels-last NHWC storage: MaxPool, AveragePool (count_include_pad either way),
// and GlobalAveragePool/GlobalMaxPool as reductions over H*W.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernel_types.h"

namespace sampan::cuda {

struct Pool2dParams {
  int64_t n = 0, c = 0, h = 0, w = 0;  //!< input
  int64_t oh = 0, ow = 0;              //!< output
  int kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int pad_top = 0, pad_left = 0;
  bool is_max = true;
  bool count_include_pad = false;
  //! Padded extent used for the count_include_pad divisor (ONNX clips the window to input + pads).
  int64_t h_padded = 0, w_padded = 0;
  bool in_nhwc = false, out_nhwc = false;  //!< channels-last storage of x / y (layout.h)
};

cudaError_t LaunchPool2d(FloatType t, const void* x, void* y, const Pool2dParams& p, cudaStream_t stream);
//! y[r] = mean or max of x[r, 0..inner) for `rows` rows.
cudaError_t LaunchGlobalPool(FloatType t, const void* x, void* y, int64_t rows, int64_t inner, bool is_max,
                             cudaStream_t stream);
//! Global pooling of a channels-last x ([N, HW, C] in memory) into y [N, C]. When n*c
//! is small against hw, the pixels are split over GlobalPoolNhwcSplits grid rows whose
//! fp32 partials go to `ws` (GlobalPoolNhwcWorkspace bytes; with less, one pass).
cudaError_t LaunchGlobalPoolNhwc(FloatType t, const void* x, void* y, int64_t n, int64_t hw, int64_t c, bool is_max,
                                 void* ws, size_t ws_bytes, cudaStream_t stream);
int64_t GlobalPoolNhwcSplits(int64_t n, int64_t hw, int64_t c);
size_t GlobalPoolNhwcWorkspace(int64_t n, int64_t hw, int64_t c);

}  // namespace sampan::cuda
