// Depthwise convolution (group == input channels, each filter reads one channel): our
// own kernel, because cuDNN's channels-last FP16 depthwise algorithms are one to two
// orders of magnitude off the memory bound on Hopper (ConvNeXt's 7x7 at 32x96x56x56:
// 1.2 ms, for 38 MB of traffic). Direct: one thread per output pixel and VEC adjacent
// channels (16-byte loads when channels-last), FP32 accumulation, with the FusedConv
// epilogue (bias, residual, activation) applied before the single store. The input is
// read through element strides, so an NCHW source, a channel slice or a padded view
// needs no copy, and padding (asymmetric too) is bounds checks, not a padded buffer.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/elementwise.h"
#include "backends/cuda/kernel_types.h"

namespace sampan::cuda {

struct DepthwiseShape {
  int64_t n, c, h, w;                                      //!< input dims (logical NCHW)
  int64_t k, oh, ow;                                       //!< output channels (c * multiplier) and spatial dims
  int64_t r, s;                                            //!< filter height/width
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;  //!< pad_*: leading pads
  int64_t xs[4];                                           //!< input strides in elements for n, c, h, w
  bool out_nhwc;                                           //!< y (and z) stored [N, OH, OW, K], else [N, K, OH, OW]
  UnaryOp act = UnaryOp::kIdentity;
  float p0 = 0, p1 = 0;  //!< activation parameters
};

//! y = act(depthwise(x, w) + bias + z). w: filters as [R*S, K] (tap-major, so adjacent
//! channels are adjacent in memory); bias: [K] or null; z: null or y's shape and layout.
//! Every index must fit in 32 bits (DepthwiseFits).
cudaError_t LaunchDepthwise(FloatType t, const DepthwiseShape& s, const void* x, const void* w, const void* bias,
                            const void* z, void* y, cudaStream_t stream);

//! Whether the shape's element offsets fit the kernel's 32-bit index arithmetic.
bool DepthwiseFits(const DepthwiseShape& s);

}  // namespace sampan::cuda
