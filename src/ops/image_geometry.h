// Resampling and pixel normalisation shared by the image ops (ResizeImage, TextLineCrop): the
// arithmetic of OpenCV's cv2.resize(INTER_LINEAR) and cv2.warpPerspective(INTER_CUBIC,
// BORDER_REPLICATE) on 8-bit images, so a pipeline served by Sampan feeds its networks the
// pixels the Python pipelines it replaces (PaddleOCR, ultralytics) compute.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace sampan::ops {

//! An 8-bit image of h rows of w pixels of c interleaved channels (HWC), not owned.
struct ImageView {
  const uint8_t* px = nullptr;
  int64_t h = 0, w = 0, c = 0;
};

//! cv2.resize(src, (ow, oh), INTER_LINEAR) into dst [oh, ow, c]: half-pixel centres, edge pixels
//! repeated, OpenCV's 11-bit fixed-point weights and rounding (bit-identical results).
void ResizeBilinear(const ImageView& src, int64_t oh, int64_t ow, uint8_t* dst);

//! The homography (row-major 3x3) taking the corners (0,0), (w,0), (w,h), (0,h) of a w x h
//! rectangle to quad[0..3] (x, y pairs); false when the quad is degenerate (three corners on a line).
bool RectToQuad(double w, double h, const float quad[8], double m[9]);

//! cv2.warpPerspective(INTER_CUBIC, BORDER_REPLICATE) into dst [oh, ow, c], with `m` mapping a
//! destination pixel (x, y) to its source position: Keys' cubic (a = -0.75) at that exact position,
//! rounded to nearest.
void WarpPerspectiveCubic(const ImageView& src, const double m[9], int64_t oh, int64_t ow, uint8_t* dst);

//! The most channels an image op takes (grey, RGB, RGBA).
constexpr int64_t kMaxImageChannels = 4;

//! Per-channel pixel normalisation, out = (px - mean) / std (pixel units), as a table per
//! output channel; with swap_rb output channel k reads input channel c-1-k (RGB <-> BGR).
struct PixelNorm {
  int64_t channels = 0;
  bool swap_rb = false;
  std::vector<float> table;  //!< [channels][256]
  float Apply(int64_t channel, uint8_t v) const { return table[static_cast<size_t>(channel * 256 + v)]; }
};

//! Reads attributes mean and std (one value, or one per channel, in output channel order) and,
//! when `allow_swap`, swap_rb (0/1; needs 3 channels). channels < 0 (unknown yet) checks values only.
Result<PixelNorm> ReadPixelNorm(const ir::Node& node, int64_t channels, bool allow_swap);

//! Writes src normalised into the planar image dst [src.c, dh, dw] at row `top`, column `left`
//! (src must fit); dst's other pixels are left as they are.
void NormalizeInto(const ImageView& src, const PixelNorm& norm, float* dst, int64_t dh, int64_t dw, int64_t top,
                   int64_t left);

//! sampan::ResizeImage's attributes (ops/resize_image.cpp documents them) and geometry, shared
//! by the reference kernel and the CUDA lowering so both size and place an image the same way.
constexpr int64_t kMaxResizeSide = 16384;
enum class ResizeMode { kLimitSide, kLetterbox, kStretch };
struct ResizeImageAttrs {
  ResizeMode mode = ResizeMode::kLimitSide;
  int64_t size_h = 0, size_w = 0, limit = 736;
  bool limit_max = false;
  int64_t pad_value = 114;
};
//! Reads and checks mode, size, limit_side_len, limit_type, pad_value (kInvalidArgument naming the node).
Result<ResizeImageAttrs> ReadResizeImageParams(const ir::Node& n);
//! Where an H x W image goes: resized size (rh, rw), padding before it (letterbox), scales.
struct ResizePlacement {
  int64_t rh = 0, rw = 0, top = 0, left = 0;
  double scale_y = 1, scale_x = 1;
};
//! kInvalidArgument when the resized image is empty or over kMaxResizeSide a side.
Result<ResizePlacement> PlaceResizedImage(const ir::Node& n, const ResizeImageAttrs& p, int64_t h, int64_t w);

}  // namespace sampan::ops
