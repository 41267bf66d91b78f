// sampan::TextLineCrop(image, boxes[, flip]) -> lines: each text box of an image cut out
// straightened and made a recognizer's (or orientation classifier's) input, as rapidocr 3.4.2
// does with get_rotate_crop_image and PaddleOCR's resize_norm_img.
//   image: uint8 [H, W, C] (HWC, as ImageDecoder gives it; PaddleOCR's models take BGR)
//   boxes: float32 [K, 4, 2], (x, y) corners clockwise from the top-left (DbPostProcess's boxes)
//   flip:  optional bool/uint8/int32/int64 [K]; non-zero rotates that line 180 degrees (the lines
//          an orientation classifier calls upside down)
//   lines: float32 [K, C, height, Wout]
// Per box: the crop is crop_w = int(max(|p0 p1|, |p2 p3|)) by crop_h = int(max(|p0 p3|, |p1 p2|))
// pixels, the perspective map of the box onto it sampled bicubically with the image's edge pixels
// repeated outside (cv2.warpPerspective INTER_CUBIC, BORDER_REPLICATE); a crop at least 1.5 times
// as high as wide is turned 90 degrees counterclockwise (a vertical line); then flipped when
// asked; then resized bilinearly (cv2.resize) to `height` rows and min(ceil(height * w / h), Wout)
// columns, normalised as (px - mean) / std per channel and padded with zeros on the right.
// Attributes: height (48); width: Wout when > 0 (the classifier's 192), or 0 for the
// recognizer's rule Wout = int(height * max(min_width / height, widest crop's w / h over the
// call's boxes)), at most max_width; min_width (320); max_width (3200); mean, std (one value or
// one per channel, pixel units; default 127.5 and 127.5, i.e. (px / 255 - 0.5) / 0.5).
// With width 0, Wout depends on the boxes: inference leaves it unknown. K = 0 gives
// [0, C, height, width or min_width].
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/common.h"
#include "ops/control_flow.h"  // SetKernelOutput
#include "ops/image_geometry.h"

namespace sampan::ops {
namespace {

constexpr int64_t kMaxCropSide = 32768;
constexpr int64_t kMaxCropPixels = int64_t{1} << 24;
constexpr int64_t kMaxOutput = int64_t{1} << 28;  // elements of the lines output

struct LineParams {
  int64_t height, width, min_width, max_width;
};

Result<LineParams> ReadParams(const ir::Node& n) {
  auto bad = [&](const auto&... a) { return InvalidArgument(n.Label(), ": ", a...); };
  LineParams p{n.attr_int("height", 48), n.attr_int("width", 0), n.attr_int("min_width", 320),
               n.attr_int("max_width", 3200)};
  if (p.height < 1 || p.height > 4096) return bad("height must be in [1, 4096], got ", p.height);
  if (p.max_width < 1 || p.max_width > 65536) return bad("max_width must be in [1, 65536], got ", p.max_width);
  if (p.width < 0 || p.width > p.max_width)
    return bad("width must be 0 (from the crops) or in [1, max_width ", p.max_width, "], got ", p.width);
  if (p.min_width < 1 || p.min_width > p.max_width)
    return bad("min_width must be in [1, max_width ", p.max_width, "], got ", p.min_width);
  return p;
}

const std::initializer_list<DType> kFlipTypes = {DType::kBool, DType::kUInt8, DType::kInt32, DType::kInt64};

Status InferTextLineCrop(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 3));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, {DType::kUInt8}));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 1, {DType::kFloat32}));
  if (ctx.has_input(2)) SP_RETURN_IF_ERROR(ExpectDType(ctx, 2, kFlipTypes));
  SP_ASSIGN_OR_RETURN(const LineParams p, ReadParams(ctx.node()));
  ir::Dim c = ir::Dim::Unknown(), k = ir::Dim::Unknown();
  if (const auto& d = ctx.input_dims(0)) {
    if (d->size() != 3) return ctx.Error("image must be [H, W, C], got rank ", d->size());
    c = (*d)[2];
  }
  if (const auto& d = ctx.input_dims(1)) {
    if (d->size() != 3 || ((*d)[1].known() && (*d)[1].value != 4) || ((*d)[2].known() && (*d)[2].value != 2))
      return ctx.Error("boxes must be [K, 4, 2]");
    k = (*d)[0];
  }
  if (ctx.has_input(2))
    if (const auto& d = ctx.input_dims(2)) {
      if (d->size() != 1) return ctx.Error("flip must be [K], got rank ", d->size());
      SP_RETURN_IF_ERROR(UnifyDim(ctx, k, (*d)[0], "flip's length and the box count"));
    }
  SP_RETURN_IF_ERROR(ReadPixelNorm(ctx.node(), c.known() ? c.value : -1, false).status());
  ir::Dim wout = ir::Dim::Unknown();
  if (p.width > 0) {
    wout = ir::Dim::Known(p.width);
  } else if (k.known() && k.value == 0) {
    wout = ir::Dim::Known(p.min_width);
  }
  ctx.set_output(0, DType::kFloat32, ir::Dims{k, c, ir::Dim::Known(p.height), wout});
  return Status::Ok();
}

// One box's crop geometry.
struct Crop {
  int64_t w, h;  // of the perspective crop
  bool turn;     // turned 90 degrees: the line's size is h x w
  double Ratio() const {
    return turn ? static_cast<double>(h) / static_cast<double>(w) : static_cast<double>(w) / static_cast<double>(h);
  }
};

Result<Crop> CropOf(const KernelContext& ctx, int64_t k, const float* q) {
  for (int i = 0; i < 8; ++i)
    if (!std::isfinite(q[i])) return ctx.Error("box ", k, " has a non-finite coordinate (", q[i], ")");
  auto dist = [&](int a, int b) {  // float32, as numpy's norm of float32 points
    const float dx = q[2 * a] - q[2 * b], dy = q[2 * a + 1] - q[2 * b + 1];
    return std::sqrt(dx * dx + dy * dy);
  };
  const float fw = std::max(dist(0, 1), dist(2, 3)), fh = std::max(dist(0, 3), dist(1, 2));
  if (!(fw < static_cast<float>(kMaxCropSide) && fh < static_cast<float>(kMaxCropSide)))
    return ctx.Error("box ", k, " gives a crop of ", fw, " x ", fh, " pixels, over the limit of ", kMaxCropSide,
                     " a side");
  Crop c{static_cast<int64_t>(fw), static_cast<int64_t>(fh), false};
  if (c.w < 1 || c.h < 1) return ctx.Error("box ", k, " gives an empty crop (", c.w, " x ", c.h, " pixels)");
  if (c.w * c.h > kMaxCropPixels)
    return ctx.Error("box ", k, " gives a crop of ", c.w, " x ", c.h, " pixels, over the limit of ", kMaxCropPixels,
                     " pixels");
  c.turn = static_cast<double>(c.h) / static_cast<double>(c.w) >= 1.5;
  return c;
}

// out [h', w', ch] = in [h, w, ch] turned 90 degrees counterclockwise (np.rot90), or 180 degrees.
std::vector<uint8_t> Turn(const std::vector<uint8_t>& in, int64_t h, int64_t w, int64_t ch, bool half) {
  std::vector<uint8_t> out(in.size());
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      const int64_t to = half ? ((h - 1 - y) * w + (w - 1 - x)) : ((w - 1 - x) * h + y);
      std::copy_n(&in[static_cast<size_t>((y * w + x) * ch)], ch, &out[static_cast<size_t>(to * ch)]);
    }
  return out;
}

bool FlipOf(const Tensor& t, int64_t k) {
  switch (t.dtype()) {
    case DType::kInt32:
      return t.data<int32_t>()[k] != 0;
    case DType::kInt64:
      return t.data<int64_t>()[k] != 0;
    default:
      return t.data<uint8_t>()[k] != 0;  // bool, uint8
  }
}

Status RunTextLineCrop(KernelContext& ctx) {
  const Tensor& image = ctx.in(0);
  const Tensor& boxes = ctx.in(1);
  if (image.rank() != 3 || image.dim(0) < 1 || image.dim(1) < 1 || image.dim(2) < 1)
    return ctx.Error("image must be a non-empty [H, W, C], got ", ShapeToString(image.shape()));
  if (boxes.rank() != 3 || boxes.dim(1) != 4 || boxes.dim(2) != 2)
    return ctx.Error("boxes must be [K, 4, 2], got ", ShapeToString(boxes.shape()));
  const int64_t k = boxes.dim(0), ch = image.dim(2);
  const Tensor* flip = ctx.has_input(2) ? &ctx.in(2) : nullptr;
  if (flip && (flip->rank() != 1 || flip->dim(0) != k))
    return ctx.Error("flip must be [K] = [", k, "], got ", ShapeToString(flip->shape()));
  SP_ASSIGN_OR_RETURN(const LineParams p, ReadParams(ctx.node));
  SP_ASSIGN_OR_RETURN(const PixelNorm norm, ReadPixelNorm(ctx.node, ch, false));
  const float* q = boxes.data<float>();
  std::vector<Crop> crops;
  for (int64_t i = 0; i < k; ++i) {
    SP_ASSIGN_OR_RETURN(Crop c, CropOf(ctx, i, q + i * 8));
    crops.push_back(c);
  }
  int64_t wout = p.width;
  if (wout == 0) {
    // rapidocr: int(height * max(min_width / height, the widest line's ratio)). The min_width
    // term is taken as min_width itself (what shape inference says for 0 lines), not through
    // the quotient, which can round one below it.
    double max_ratio = 0;
    for (const Crop& c : crops) max_ratio = std::max(max_ratio, c.Ratio());
    const double w = static_cast<double>(p.height) * max_ratio;
    wout = w >= static_cast<double>(p.max_width) ? p.max_width : std::max(p.min_width, static_cast<int64_t>(w));
  }
  if (k * ch * p.height * wout > kMaxOutput)
    return ctx.Error("the lines output [", k, ", ", ch, ", ", p.height, ", ", wout, "] is over the limit of ",
                     kMaxOutput, " elements");
  Tensor out = Tensor::Alloc(DType::kFloat32, {k, ch, p.height, wout});
  std::fill_n(out.mutable_data<float>(), out.numel(), 0.f);
  const ImageView src{image.data<uint8_t>(), image.dim(0), image.dim(1), ch};
  std::vector<uint8_t> crop, resized;
  for (int64_t i = 0; i < k; ++i) {
    const Crop& c = crops[static_cast<size_t>(i)];
    double m[9];
    if (!RectToQuad(static_cast<double>(c.w), static_cast<double>(c.h), q + i * 8, m))
      return ctx.Error("box ", i, " is degenerate (three corners on a line)");
    crop.resize(static_cast<size_t>(c.w * c.h * ch));
    WarpPerspectiveCubic(src, m, c.h, c.w, crop.data());
    int64_t lh = c.h, lw = c.w;
    if (c.turn) {
      crop = Turn(crop, c.h, c.w, ch, false);
      std::swap(lh, lw);
    }
    if (flip && FlipOf(*flip, i)) crop = Turn(crop, lh, lw, ch, true);
    const double want = std::ceil(static_cast<double>(p.height) * (static_cast<double>(lw) / static_cast<double>(lh)));
    const int64_t rw = want > static_cast<double>(wout) ? wout : static_cast<int64_t>(want);
    resized.resize(static_cast<size_t>(p.height * rw * ch));
    ResizeBilinear(ImageView{crop.data(), lh, lw, ch}, p.height, rw, resized.data());
    NormalizeInto(ImageView{resized.data(), p.height, rw, ch}, norm,
                  out.mutable_data<float>() + i * ch * p.height * wout, p.height, wout, 0, 0);
  }
  SetKernelOutput(ctx, 0, std::move(out));
  return Status::Ok();
}

}  // namespace

SAMPAN_REGISTER_OP_DEF(
    {.domain = "sampan", .op_type = "TextLineCrop", .infer = InferTextLineCrop, .run = RunTextLineCrop});

}  // namespace sampan::ops
