// sampan::ImageInput on the GPU: uint8 [N, H, W, C] images to normalised
// float/half/bf16 network input, (x - mean[c]) * scale[c], in one pass.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernel_types.h"

namespace sampan::cuda {

//! Most channels the kernel takes (mean/scale travel as kernel parameters).
constexpr int kMaxImageChannels = 8;

struct ImageInputParams {
  int64_t n = 0, h = 0, w = 0, c = 0;
  float mean[kMaxImageChannels] = {};
  float scale[kMaxImageChannels] = {};
  bool out_nhwc = false;  //!< y stored [N, H, W, C] (layout "NHWC", or channels-last storage of NCHW)
};

cudaError_t LaunchImageInput(FloatType to, const void* x, void* y, const ImageInputParams& p, cudaStream_t stream);

}  // namespace sampan::cuda
