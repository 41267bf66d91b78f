#include "ops/image_geometry.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

namespace sampan::ops {
namespace {

constexpr int kCoefBits = 11;  // OpenCV's INTER_RESIZE_COEF_BITS
constexpr int kCoefOne = 1 << kCoefBits;

// A weight pair (1 - f, f) in fixed point, each rounded to nearest-even as cvRound does.
std::pair<int32_t, int32_t> FixedWeights(float f) {
  return {static_cast<int32_t>(std::nearbyint((1.f - f) * kCoefOne)),
          static_cast<int32_t>(std::nearbyint(f * kCoefOne))};
}

// Source position of destination index d: (d + 0.5) * scale - 0.5, in float as OpenCV keeps it.
float SourcePos(int64_t d, double scale) {
  return static_cast<float>((static_cast<double>(d) + 0.5) * scale - 0.5);
}

// Keys' cubic convolution weights (a = -0.75, OpenCV's) of the 4 taps around fraction x in [0, 1).
void CubicWeights(float x, float w[4]) {
  constexpr float a = -0.75f;
  w[0] = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a;
  w[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
  w[2] = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1;
  w[3] = 1.f - w[0] - w[1] - w[2];
}

}  // namespace

void ResizeBilinear(const ImageView& src, int64_t oh, int64_t ow, uint8_t* dst) {
  const int64_t c = src.c, w = src.w, h = src.h;
  const double scale_x = 1.0 / (static_cast<double>(ow) / static_cast<double>(w));
  const double scale_y = 1.0 / (static_cast<double>(oh) / static_cast<double>(h));
  // Columns: the left tap and its weights; positions past either edge take the edge pixel alone.
  std::vector<int64_t> x0(static_cast<size_t>(ow)), x1(static_cast<size_t>(ow));
  std::vector<int32_t> a0(static_cast<size_t>(ow)), a1(static_cast<size_t>(ow));
  for (int64_t dx = 0; dx < ow; ++dx) {
    float f = SourcePos(dx, scale_x);
    int64_t sx = static_cast<int64_t>(std::floor(f));
    f -= static_cast<float>(sx);
    if (sx < 0) f = 0.f, sx = 0;
    if (sx >= w - 1) f = 0.f, sx = w - 1;
    const auto [wa, wb] = FixedWeights(f);
    const size_t i = static_cast<size_t>(dx);
    x0[i] = sx * c;
    x1[i] = std::min(sx + 1, w - 1) * c;
    a0[i] = wa;
    a1[i] = wb;
  }
  // Rows of horizontally interpolated sums (scaled by 2^11), two source rows cached.
  const size_t row_len = static_cast<size_t>(ow * c);
  std::vector<int32_t> rows[2] = {std::vector<int32_t>(row_len), std::vector<int32_t>(row_len)};
  int64_t cached[2] = {-1, -1};
  auto horizontal = [&](int64_t sy, std::vector<int32_t>& out) {
    const uint8_t* s = src.px + sy * w * c;
    for (int64_t dx = 0; dx < ow; ++dx) {
      const size_t i = static_cast<size_t>(dx);
      for (int64_t k = 0; k < c; ++k)
        out[static_cast<size_t>(dx * c + k)] = s[x0[i] + k] * a0[i] + s[x1[i] + k] * a1[i];
    }
  };
  auto row = [&](int64_t sy) -> const std::vector<int32_t>& {
    sy = std::clamp<int64_t>(sy, 0, h - 1);
    for (int k = 0; k < 2; ++k)
      if (cached[k] == sy) return rows[k];
    const int slot = cached[0] == -1 || (cached[1] != -1 && cached[0] < cached[1]) ? 0 : 1;
    horizontal(sy, rows[slot]);
    cached[slot] = sy;
    return rows[slot];
  };
  for (int64_t dy = 0; dy < oh; ++dy) {
    // Rows are clamped but the fraction is kept (OpenCV's vertical pass), which changes the
    // rounding of the first and last rows.
    float f = SourcePos(dy, scale_y);
    const int64_t sy = static_cast<int64_t>(std::floor(f));
    f -= static_cast<float>(sy);
    const auto [b0, b1] = FixedWeights(f);
    const std::vector<int32_t>& r0 = row(sy);
    const std::vector<int32_t>& r1 = row(sy + 1);
    uint8_t* d = dst + dy * static_cast<int64_t>(row_len);
    for (size_t i = 0; i < row_len; ++i) {
      // OpenCV's vectorised rounding: each product pre-shifted, then (sum + 2) >> 2.
      const int32_t v = (((b0 * (r0[i] >> 4)) >> 16) + ((b1 * (r1[i] >> 4)) >> 16) + 2) >> 2;
      d[i] = static_cast<uint8_t>(std::clamp(v, 0, 255));
    }
  }
}

bool RectToQuad(double w, double h, const float quad[8], double m[9]) {
  // m = [a b c; d e f; g h' 1]: u = (a x + b y + c) / (g x + h' y + 1), v likewise; 8 equations.
  const double rect[4][2] = {{0, 0}, {w, 0}, {w, h}, {0, h}};
  double a[8][9];
  for (int k = 0; k < 4; ++k) {
    const double x = rect[k][0], y = rect[k][1], u = quad[2 * k], v = quad[2 * k + 1];
    const double r0[9] = {x, y, 1, 0, 0, 0, -u * x, -u * y, u};
    const double r1[9] = {0, 0, 0, x, y, 1, -v * x, -v * y, v};
    std::copy(r0, r0 + 9, a[2 * k]);
    std::copy(r1, r1 + 9, a[2 * k + 1]);
  }
  double scale = 0;  // pivots are judged against the size of the coordinates
  for (auto& r : a)
    for (double v : r) scale = std::max(scale, std::fabs(v));
  for (int col = 0; col < 8; ++col) {
    int piv = col;
    for (int r = col + 1; r < 8; ++r)
      if (std::fabs(a[r][col]) > std::fabs(a[piv][col])) piv = r;
    if (!(std::fabs(a[piv][col]) > 1e-12 * scale)) return false;
    std::swap(a[piv], a[col]);
    for (int r = 0; r < 8; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (int k = col; k < 9; ++k) a[r][k] -= f * a[col][k];
    }
  }
  for (int k = 0; k < 8; ++k) m[k] = a[k][8] / a[k][k];
  m[8] = 1;
  for (int k = 0; k < 9; ++k)
    if (!std::isfinite(m[k])) return false;
  return true;
}

void WarpPerspectiveCubic(const ImageView& src, const double m[9], int64_t oh, int64_t ow, uint8_t* dst) {
  const int64_t c = src.c;
  constexpr double kFar = 1e9;  // far outside any image: every tap is an edge pixel
  std::vector<double> acc(static_cast<size_t>(c));
  for (int64_t y = 0; y < oh; ++y)
    for (int64_t x = 0; x < ow; ++x) {
      const double xd = static_cast<double>(x), yd = static_cast<double>(y);
      const double wq = m[6] * xd + m[7] * yd + m[8];
      double sx = wq != 0 ? (m[0] * xd + m[1] * yd + m[2]) / wq : 0;
      double sy = wq != 0 ? (m[3] * xd + m[4] * yd + m[5]) / wq : 0;
      sx = std::isfinite(sx) ? std::clamp(sx, -kFar, kFar) : 0;
      sy = std::isfinite(sy) ? std::clamp(sy, -kFar, kFar) : 0;
      const double fx = std::floor(sx), fy = std::floor(sy);
      float wx[4], wy[4];
      CubicWeights(static_cast<float>(sx - fx), wx);
      CubicWeights(static_cast<float>(sy - fy), wy);
      int64_t cols[4], rows[4];
      for (int k = 0; k < 4; ++k) {
        cols[k] = std::clamp<int64_t>(static_cast<int64_t>(fx) - 1 + k, 0, src.w - 1) * c;
        rows[k] = std::clamp<int64_t>(static_cast<int64_t>(fy) - 1 + k, 0, src.h - 1) * src.w * c;
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          const double wgt = static_cast<double>(wy[i] * wx[j]);
          const uint8_t* p = src.px + rows[i] + cols[j];
          for (int64_t k = 0; k < c; ++k) acc[static_cast<size_t>(k)] += wgt * p[k];
        }
      uint8_t* d = dst + (y * ow + x) * c;
      for (int64_t k = 0; k < c; ++k)
        d[k] = static_cast<uint8_t>(std::clamp(std::nearbyint(acc[static_cast<size_t>(k)]), 0.0, 255.0));
    }
}

Result<PixelNorm> ReadPixelNorm(const ir::Node& node, int64_t channels, bool allow_swap) {
  // Images have 1 to 4 channels; a larger count (an input that is not an image) is refused
  // before the per-channel table is made.
  if (channels > kMaxImageChannels)
    return InvalidArgument(node.Label(), ": the image has ", channels, " channels (at most ", kMaxImageChannels, ")");
  const std::vector<float> mean = node.attr_floats("mean", {127.5f});
  const std::vector<float> stdev = node.attr_floats("std", {127.5f});
  auto bad = [&](const auto&... a) { return InvalidArgument(node.Label(), ": ", a...); };
  for (const auto* v : {&mean, &stdev}) {
    const char* name = v == &mean ? "mean" : "std";
    if (v->empty()) return bad(name, " is empty");
    if (channels >= 0 && v->size() != 1 && static_cast<int64_t>(v->size()) != channels)
      return bad(name, " has ", v->size(), " values but the image has ", channels, " channels (give 1 or ", channels,
                 ")");
    for (float x : *v)
      if (!std::isfinite(x) || (v == &stdev && x == 0.f)) return bad(name, " value ", x, " is not usable");
  }
  PixelNorm norm;
  if (allow_swap) {
    const int64_t swap = node.attr_int("swap_rb", 0);
    if (swap != 0 && swap != 1) return bad("swap_rb must be 0 or 1, got ", swap);
    norm.swap_rb = swap == 1;
    if (norm.swap_rb && channels >= 0 && channels != 3)
      return bad("swap_rb needs a 3-channel image, got ", channels, " channels");
  }
  if (channels < 0) return norm;
  norm.channels = channels;
  norm.table.resize(static_cast<size_t>(channels * 256));
  for (int64_t k = 0; k < channels; ++k) {
    const float mu = mean[mean.size() == 1 ? 0 : static_cast<size_t>(k)];
    const float s = stdev[stdev.size() == 1 ? 0 : static_cast<size_t>(k)];
    for (int v = 0; v < 256; ++v) norm.table[static_cast<size_t>(k * 256 + v)] = (static_cast<float>(v) - mu) / s;
  }
  return norm;
}

void NormalizeInto(const ImageView& src, const PixelNorm& norm, float* dst, int64_t dh, int64_t dw, int64_t top,
                   int64_t left) {
  const int64_t c = src.c;
  for (int64_t k = 0; k < c; ++k) {
    const int64_t from = norm.swap_rb ? c - 1 - k : k;
    float* plane = dst + k * dh * dw;
    for (int64_t y = 0; y < src.h; ++y) {
      const uint8_t* s = src.px + y * src.w * c + from;
      float* d = plane + (top + y) * dw + left;
      for (int64_t x = 0; x < src.w; ++x) d[x] = norm.Apply(k, s[x * c]);
    }
  }
}

// ---------------------------------------------------------------- ResizeImage geometry

Result<ResizeImageAttrs> ReadResizeImageParams(const ir::Node& n) {
  auto bad = [&](const auto&... a) { return InvalidArgument(n.Label(), ": ", a...); };
  ResizeImageAttrs p;
  const std::string mode = n.attr_string("mode", "limit_side");
  if (mode == "limit_side") {
    p.mode = ResizeMode::kLimitSide;
  } else if (mode == "letterbox") {
    p.mode = ResizeMode::kLetterbox;
  } else if (mode == "stretch") {
    p.mode = ResizeMode::kStretch;
  } else {
    return bad("mode must be 'limit_side', 'letterbox' or 'stretch', got '", mode, "'");
  }
  if (p.mode == ResizeMode::kLimitSide) {
    p.limit = n.attr_int("limit_side_len", 736);
    if (p.limit < 1 || p.limit > kMaxResizeSide)
      return bad("limit_side_len must be in [1, ", kMaxResizeSide, "], got ", p.limit);
    const std::string type = n.attr_string("limit_type", "min");
    if (type != "min" && type != "max") return bad("limit_type must be 'min' or 'max', got '", type, "'");
    p.limit_max = type == "max";
  } else {
    const std::vector<int64_t> size = n.attr_ints("size");
    if (size.size() != 2) return bad("mode '", mode, "' needs size = (h, w), got ", size.size(), " values");
    p.size_h = size[0];
    p.size_w = size[1];
    if (p.size_h < 1 || p.size_w < 1 || p.size_h > kMaxResizeSide || p.size_w > kMaxResizeSide)
      return bad("size (", p.size_h, ", ", p.size_w, ") must be in [1, ", kMaxResizeSide, "] per side");
  }
  p.pad_value = n.attr_int("pad_value", 114);
  if (p.pad_value < 0 || p.pad_value > 255) return bad("pad_value must be in [0, 255], got ", p.pad_value);
  return p;
}

// Python's round(): to nearest, halves to even.
static int64_t PyRound(double v) {
  return static_cast<int64_t>(std::nearbyint(v));
}

Result<ResizePlacement> PlaceResizedImage(const ir::Node& n, const ResizeImageAttrs& p, int64_t h, int64_t w) {
  ResizePlacement pl{};
  const double hd = static_cast<double>(h), wd = static_cast<double>(w);
  switch (p.mode) {
    case ResizeMode::kLimitSide: {
      const double lim = static_cast<double>(p.limit);
      double ratio = 1.0;
      if (p.limit_max ? std::max(h, w) > p.limit : std::min(h, w) < p.limit)
        ratio = lim / ((h < w) != p.limit_max ? hd : wd);
      const double rh = std::min(std::trunc(hd * ratio), 1e12), rw = std::min(std::trunc(wd * ratio), 1e12);
      pl.rh = PyRound(rh / 32) * 32;
      pl.rw = PyRound(rw / 32) * 32;
      pl.scale_y = static_cast<double>(pl.rh) / hd;
      pl.scale_x = static_cast<double>(pl.rw) / wd;
      break;
    }
    case ResizeMode::kLetterbox: {
      const double r = std::min(static_cast<double>(p.size_h) / hd, static_cast<double>(p.size_w) / wd);
      pl.rh = PyRound(hd * r);
      pl.rw = PyRound(wd * r);
      pl.top = PyRound(static_cast<double>(p.size_h - pl.rh) / 2 - 0.1);
      pl.left = PyRound(static_cast<double>(p.size_w - pl.rw) / 2 - 0.1);
      pl.scale_y = pl.scale_x = r;
      break;
    }
    case ResizeMode::kStretch:
      pl.rh = p.size_h;
      pl.rw = p.size_w;
      pl.scale_y = static_cast<double>(p.size_h) / hd;
      pl.scale_x = static_cast<double>(p.size_w) / wd;
      break;
  }
  if (pl.rh < 1 || pl.rw < 1)
    return InvalidArgument(n.Label(), ": a ", h, " x ", w, " image resizes to ", pl.rh, " x ", pl.rw, " (empty)");
  if (pl.rh > kMaxResizeSide || pl.rw > kMaxResizeSide)
    return InvalidArgument(n.Label(), ": a ", h, " x ", w, " image resizes to ", pl.rh, " x ", pl.rw,
                           ", over the limit of ", kMaxResizeSide, " a side");
  return pl;
}

}  // namespace sampan::ops
