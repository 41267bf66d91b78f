// sampan::ResizeImage on the GPU (resize_image.cu): uint8 HWC images resized as
// cv2.resize(INTER_LINEAR) does it (ops/image_geometry.cpp's ResizeBilinear: source positions in
// double rounded to float, OpenCV's 11-bit fixed-point weights and its vectorised rounding, all
// integer on the device), placed in the output planes (letterbox padding) and normalised per
// channel, (px - mean) / std in float, into float32 [N, C, oh, ow]. One thread per output pixel;
// the geometry (sizes, offsets, transform) is the host's, worked out when lowering.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sampan::cuda {

//! Most channels ResizeImage takes (ops/image_geometry.h: grey, RGB, RGBA).
constexpr int kMaxResizeImageChannels = 4;

struct ResizeImageParams {
  int64_t n = 0, h = 0, w = 0, c = 0;       //!< the images, uint8 [n, h, w, c]
  int64_t oh = 0, ow = 0;                   //!< output planes
  int64_t rh = 0, rw = 0;                   //!< the resized image inside them
  int64_t top = 0, left = 0;                //!< where it lies (letterbox); the rest is padding
  double inv_scale_y = 1, inv_scale_x = 1;  //!< 1 / (rh / h), 1 / (rw / w), as OpenCV keeps them
  bool copy = false;                        //!< rh == h and rw == w: pixels are taken as they are
  bool swap_rb = false;                     //!< output channel k reads input channel c - 1 - k
  float mean[kMaxResizeImageChannels] = {};
  float stdev[kMaxResizeImageChannels] = {};
  float pad[kMaxResizeImageChannels] = {};  //!< the normalised pad value of each output channel
  float transform[4] = {};                  //!< (scale_y, scale_x, pad_top, pad_left)
};

//! y: float32 [n, c, oh, ow]; transform (float32 [4], may be null) gets p.transform.
cudaError_t LaunchResizeImage(const uint8_t* x, float* y, float* transform, const ResizeImageParams& p,
                              cudaStream_t stream);

}  // namespace sampan::cuda
