// sampan::ResizeImage(image) -> (tensor, transform): decoded images to a vision network's
// normalised input, the preprocessing of the served detection pipelines.
//   image:     uint8 [H, W, C] or [N, H, W, C] (images of one size), HWC as ImageDecoder gives it
//   tensor:    float32 [N, C, h, w], (px - mean) / std per channel (output channel order)
//   transform: float32 [4] = (scale_y, scale_x, pad_top, pad_left): a network pixel position
//              maps back to the image as src = (net - pad) / scale
// Attribute mode:
//   "limit_side" (default): PaddleOCR's DB preprocessing (rapidocr 3.4.2 DetPreProcess): ratio =
//     limit_side_len / the shorter side when limit_type is "min" and that side is shorter (or
//     / the longer side when "max" and that side is longer), else 1; each side int(side * ratio)
//     then rounded to a multiple of 32 (half to even); transform (h/H, w/W, 0, 0). h and w follow
//     from the image's size: unknown to inference when it is.
//   "letterbox": ultralytics' LetterBox(auto=False, center=True) to size (h, w): r = min(h/H, w/W),
//     the image resized to (round(H r), round(W r)), centred with int(round(pad/2 -+ 0.1)) rows and
//     columns of pad_value (114) before and after; transform (r, r, top, left).
//   "stretch": resized to size (h, w); transform (h/H, w/W, 0, 0).
// Resizing is cv2.resize INTER_LINEAR (bit-exact). Attributes: size (ints h, w; letterbox and
// stretch), limit_side_len (736), limit_type ("min" | "max"), mean (127.5), std (127.5) (one value or
// one per channel, pixel units), swap_rb (0; 1 reverses the channels, RGB <-> BGR), pad_value (114).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/common.h"
#include "ops/control_flow.h"  // SetKernelOutput
#include "ops/image_geometry.h"

namespace sampan::ops {
namespace {

constexpr int64_t kMaxOutput = int64_t{1} << 28;  // elements of the tensor output
using Mode = ResizeMode;

Status InferResizeImage(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  if (ctx.num_outputs() < 1 || ctx.num_outputs() > 2)
    return ctx.Error("has 1 or 2 outputs (tensor[, transform]), got ", ctx.num_outputs());
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, {DType::kUInt8}));
  SP_ASSIGN_OR_RETURN(const ResizeImageAttrs p, ReadResizeImageParams(ctx.node()));
  ir::Dim n = ir::Dim::Known(1), c = ir::Dim::Unknown(), h = ir::Dim::Unknown(), w = ir::Dim::Unknown();
  if (const auto& d = ctx.input_dims(0)) {
    if (d->size() != 3 && d->size() != 4)
      return ctx.Error("image must be [H, W, C] or [N, H, W, C], got rank ", d->size());
    const size_t off = d->size() - 3;
    if (off) n = (*d)[0];
    c = (*d)[off + 2];
    if (p.mode == Mode::kLimitSide && (*d)[off].known() && (*d)[off + 1].known() && (*d)[off].value > 0 &&
        (*d)[off + 1].value > 0) {
      SP_ASSIGN_OR_RETURN(const ResizePlacement pl,
                          PlaceResizedImage(ctx.node(), p, (*d)[off].value, (*d)[off + 1].value));
      h = ir::Dim::Known(pl.rh);
      w = ir::Dim::Known(pl.rw);
    }
  }
  if (p.mode != Mode::kLimitSide) {
    h = ir::Dim::Known(p.size_h);
    w = ir::Dim::Known(p.size_w);
  }
  SP_RETURN_IF_ERROR(ReadPixelNorm(ctx.node(), c.known() ? c.value : -1, true).status());
  ctx.set_output(0, DType::kFloat32, ir::Dims{n, c, h, w});
  if (ctx.num_outputs() > 1) ctx.set_output(1, DType::kFloat32, ir::Dims{ir::Dim::Known(4)});
  return Status::Ok();
}

Status RunResizeImage(KernelContext& ctx) {
  const Tensor& image = ctx.in(0);
  const Shape& s = image.shape();
  if (s.size() != 3 && s.size() != 4)
    return ctx.Error("image must be [H, W, C] or [N, H, W, C], got ", ShapeToString(s));
  const size_t off = s.size() - 3;
  const int64_t n = off ? s[0] : 1, h = s[off], w = s[off + 1], c = s[off + 2];
  if (h < 1 || w < 1 || c < 1) return ctx.Error("image ", ShapeToString(s), " is empty");
  SP_ASSIGN_OR_RETURN(const ResizeImageAttrs p, ReadResizeImageParams(ctx.node));
  SP_ASSIGN_OR_RETURN(const PixelNorm norm, ReadPixelNorm(ctx.node, c, true));
  SP_ASSIGN_OR_RETURN(const ResizePlacement pl, PlaceResizedImage(ctx.node, p, h, w));
  const int64_t oh = p.mode == Mode::kLetterbox ? p.size_h : pl.rh, ow = p.mode == Mode::kLetterbox ? p.size_w : pl.rw;
  if (n * c * oh * ow > kMaxOutput)
    return ctx.Error("the output [", n, ", ", c, ", ", oh, ", ", ow, "] is over the limit of ", kMaxOutput,
                     " elements");
  Tensor out = Tensor::Alloc(DType::kFloat32, {n, c, oh, ow});
  float* y = out.mutable_data<float>();
  std::vector<uint8_t> resized(static_cast<size_t>(pl.rh * pl.rw * c));
  for (int64_t b = 0; b < n; ++b) {
    float* plane = y + b * c * oh * ow;
    for (int64_t k = 0; k < c; ++k)
      std::fill_n(plane + k * oh * ow, oh * ow, norm.Apply(k, static_cast<uint8_t>(p.pad_value)));
    const ImageView src{image.data<uint8_t>() + b * h * w * c, h, w, c};
    if (pl.rh == h && pl.rw == w) {
      std::memcpy(resized.data(), src.px, resized.size());
    } else {
      ResizeBilinear(src, pl.rh, pl.rw, resized.data());
    }
    NormalizeInto(ImageView{resized.data(), pl.rh, pl.rw, c}, norm, plane, oh, ow, pl.top, pl.left);
  }
  SetKernelOutput(ctx, 0, std::move(out));
  if (ctx.outputs.size() > 1) {
    Tensor t = Tensor::Alloc(DType::kFloat32, {4});
    float* v = t.mutable_data<float>();
    v[0] = static_cast<float>(pl.scale_y);
    v[1] = static_cast<float>(pl.scale_x);
    v[2] = static_cast<float>(pl.top);
    v[3] = static_cast<float>(pl.left);
    SetKernelOutput(ctx, 1, std::move(t));
  }
  return Status::Ok();
}

}  // namespace

SAMPAN_REGISTER_OP_DEF(
    {.domain = "sampan", .op_type = "ResizeImage", .infer = InferResizeImage, .run = RunResizeImage});

}  // namespace sampan::ops
