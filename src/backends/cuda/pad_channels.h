// Channels-last copy with the channels zero-padded: an image-like tensor of C < 8
// channels (a first convolution's RGB input) as [N, H, W, Cp] for cuDNN engines that
// need the channel count to be a multiple of 8. The source is read through element
// strides, so an NCHW graph input is converted and padded in the same pass.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

struct PadChannelsShape {
  int64_t n, c, h, w;      //!< logical source dims
  int64_t sn, sc, sh, sw;  //!< source strides in elements
  int64_t cp;              //!< padded channel count (> c)
};

//! dst[((n * H + h) * W + w) * cp + k] = k < c ? src[n*sn + k*sc + h*sh + w*sw] : 0, for
//! 2-byte elements (fp16/bf16; zero is all-zero bits).
cudaError_t LaunchPadChannels2(const void* src, void* dst, const PadChannelsShape& s, cudaStream_t stream);

}  // namespace sampan::cuda
