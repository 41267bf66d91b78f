// Resize / Upsample kernels (resize.cu): one thread per output element. Each resized
// axis maps its output index to a source coordinate (computed in double, with the ONNX
// reference's operation order, so nearest-neighbour picks and tf_crop_and_resize
// extrapolation decisions match the reference bit for bit), then the neighbours are
// combined: 1 for nearest, n per interpolated axis for linear/cubic (n-linear/n-cubic).
// Axes are given in the output's storage order with the input's element strides, so
// channels-last (NHWC) storage is just another stride pattern.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernel_types.h"

namespace sampan::cuda {

enum class ResizeMode { kNearest, kLinear, kCubic };
enum class ResizeCoord {
  kHalfPixel,
  kHalfPixelSymmetric,
  kAsymmetric,
  kAlignCorners,
  kPytorchHalfPixel,
  kTfCropAndResize,
  kTfHalfPixelForNN,
};
//! kSimple: Upsample and Resize-10 (ceil when downscaling, else truncate).
enum class ResizeNearest { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kSimple };

//! Most axes linear/cubic interpolate at once (taps multiply per axis).
constexpr int kMaxResizeInterpAxes = 3;
//! Most taps per axis (antialiased downscaling widens the filter by 1/scale).
constexpr int kMaxResizeTaps = 32;

//! One axis, in the output's storage order.
struct ResizeAxis {
  int64_t in = 1, out = 1;                //!< input and output size
  int64_t in_stride = 0;                  //!< element stride of the input along this axis
  bool resized = false;                   //!< false: the output index is the input index
  double scale = 1.0;                     //!< output/input scale as the reference computes it
  double out_w = 1.0;                     //!< scale * in (the reference's "output width")
  double roi_start = 0.0, roi_end = 1.0;  //!< tf_crop_and_resize region (fractions of in - 1)
  int taps = 1;                           //!< linear/cubic: filter taps
  int start = 0;                          //!< linear/cubic: offset of the first tap from floor(x)
  double aa_scale = 1.0;                  //!< antialias: min(scale, 1), the filter's compression
};

struct ResizeParams {
  int rank = 0;
  ResizeAxis axis[kMaxRank];
  ResizeMode mode = ResizeMode::kNearest;
  ResizeCoord coord = ResizeCoord::kHalfPixel;
  ResizeNearest nearest = ResizeNearest::kRoundPreferFloor;
  bool antialias = false;
  bool exclude_outside = false;
  double cubic_a = -0.75;
  //! Linear/cubic: positions of the resized axes in `axis` (n_interp of them).
  int n_interp = 0;
  int interp[kMaxResizeInterpAxes] = {};
  float extrapolation = 0.f;        //!< tf_crop_and_resize outside value (float kernels)
  uint64_t extrapolation_bits = 0;  //!< the same value in the element type (nearest: raw bytes)
};

//! Nearest-neighbour resize of any element type of `elem_size` 1, 2, 4 or 8 bytes
//! (elements are moved, not converted). y is dense in the order of p.axis.
cudaError_t LaunchResizeNearest(size_t elem_size, const void* x, void* y, const ResizeParams& p, cudaStream_t stream);
//! Linear/cubic resize (float accumulation); `max_taps` is the largest ResizeAxis::taps.
cudaError_t LaunchResizeInterp(FloatType t, const void* x, void* y, const ResizeParams& p, int max_taps,
                               cudaStream_t stream);

}  // namespace sampan::cuda
