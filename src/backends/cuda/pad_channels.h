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

//! A stride-2 convolution's input folded 2x2 into channels (space-to-depth), zero-padded:
//! dst[n, i, j, k] for k = (c * 2 + dy) * 2 + dx < 4c is x[n, c, 2i + dy - pad_h, 2j + dx - pad_w]
//! (zero outside x), and 0 for 4c <= k < cp. A convolution of kernel R x S, stride 2 over x
//! is then one of kernel ceil(R/2) x ceil(S/2), stride 1, no padding over dst, with the
//! filters folded the same way (ConvKernel's space-to-depth tactics): RGB stems run with
//! 16 channels on tensor cores instead of 3.
struct SpaceToDepthShape {
  int64_t n, c, h, w;      //!< logical source dims
  int64_t sn, sc, sh, sw;  //!< source strides in elements
  int64_t pad_h, pad_w;    //!< leading padding of the original convolution
  int64_t hs, ws;          //!< destination spatial dims
  int64_t cp;              //!< destination channels (>= 4c, a multiple of 8)
};

//! For 2-byte elements (fp16/bf16).
cudaError_t LaunchSpaceToDepth2(const void* src, void* dst, const SpaceToDepthShape& s, cudaStream_t stream);

}  // namespace sampan::cuda
