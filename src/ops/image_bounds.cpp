// sampan::ImageWithinBounds(image) -> (bounded, ratio): rapidocr's resize_image_within_bounds,
// the first thing its pipeline does to a picture, so a served OCR pipeline reads a 4000 x 3000
// phone photo as rapidocr does (and at its cost), not at full resolution.
//   image:   uint8 [H, W, C] (HWC, as ImageDecoder gives it)
//   bounded: uint8 [h, w, C]: when max(H, W) > max_side_len, the longer side scaled to
//            max_side_len; then, when the shorter side is under min_side_len, scaled up to it;
//            each scaled size is int(side * ratio) rounded to a multiple of 32 (Python's round,
//            half to even), resampled as cv2.resize(INTER_LINEAR). Otherwise the image as it is.
//   ratio:   float32 [2] = (H / h, W / w): a point (x, y) of `bounded` is (x * ratio[1],
//            y * ratio[0]) in `image` (rapidocr's map_boxes_to_original).
// Attributes: max_side_len (2000), min_side_len (30). When both scalings apply, the ratio is to the
// original image (rapidocr keeps only the second step's). A scaled side of 0 (rapidocr's
// ResizeImgError) and an output over 2^28 elements are errors.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "ops/common.h"
#include "ops/control_flow.h"  // SetKernelOutput
#include "ops/image_geometry.h"

namespace sampan::ops {
namespace {

constexpr int64_t kMaxOutput = int64_t{1} << 28;

struct Bounds {
  int64_t max_side, min_side;
};

Result<Bounds> ReadBounds(const ir::Node& n) {
  Bounds b{n.attr_int("max_side_len", 2000), n.attr_int("min_side_len", 30)};
  if (b.max_side < 32 || b.max_side > 16384)
    return InvalidArgument(n.Label(), ": max_side_len must be in [32, 16384], got ", b.max_side);
  if (b.min_side < 0 || b.min_side > b.max_side)
    return InvalidArgument(n.Label(), ": min_side_len must be in [0, max_side_len ", b.max_side, "], got ", b.min_side);
  return b;
}

// rapidocr's reduce_max_side / increase_min_side size rule: int(side * ratio), then
// round(that / 32) * 32 with Python's round (half to even).
int64_t Scaled(int64_t side, double ratio) {
  const auto s = static_cast<int64_t>(static_cast<double>(side) * ratio);
  return static_cast<int64_t>(std::nearbyint(static_cast<double>(s) / 32.0)) * 32;
}

Status InferImageWithinBounds(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  if (ctx.num_outputs() < 1 || ctx.num_outputs() > 2)
    return ctx.Error("has 1 or 2 outputs (bounded[, ratio]), got ", ctx.num_outputs());
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, {DType::kUInt8}));
  SP_RETURN_IF_ERROR(ReadBounds(ctx.node()).status());
  ir::Dim c = ir::Dim::Unknown();
  if (const auto& d = ctx.input_dims(0)) {
    if (d->size() != 3) return ctx.Error("image must be [H, W, C], got rank ", d->size());
    c = (*d)[2];
    if (c.known() && (c.value < 1 || c.value > kMaxImageChannels))
      return ctx.Error("the image has ", c.value, " channels (1 to ", kMaxImageChannels, ")");
  }
  ctx.set_output(0, DType::kUInt8, ir::Dims{ir::Dim::Unknown(), ir::Dim::Unknown(), c});
  if (ctx.num_outputs() > 1) ctx.set_output(1, DType::kFloat32, ir::Dims{ir::Dim::Known(2)});
  return Status::Ok();
}

Status RunImageWithinBounds(KernelContext& ctx) {
  const Tensor& image = ctx.in(0);
  if (image.rank() != 3) return ctx.Error("image must be [H, W, C], got ", ShapeToString(image.shape()));
  const int64_t h = image.dim(0), w = image.dim(1), c = image.dim(2);
  if (h < 1 || w < 1) return ctx.Error("image ", ShapeToString(image.shape()), " is empty");
  if (c < 1 || c > kMaxImageChannels) return ctx.Error("the image has ", c, " channels (1 to ", kMaxImageChannels, ")");
  SP_ASSIGN_OR_RETURN(const Bounds b, ReadBounds(ctx.node));
  int64_t rh = h, rw = w;
  if (std::max(h, w) > b.max_side) {
    const double r = static_cast<double>(b.max_side) / static_cast<double>(h > w ? h : w);
    rh = Scaled(h, r);
    rw = Scaled(w, r);
  }
  if (rh > 0 && rw > 0 && std::min(rh, rw) < b.min_side) {
    const double r = static_cast<double>(b.min_side) / static_cast<double>(rh < rw ? rh : rw);
    rh = Scaled(rh, r);
    rw = Scaled(rw, r);
  }
  if (rh < 1 || rw < 1)
    return ctx.Error("image ", h, " x ", w, " scales to ", rh, " x ", rw, " within max_side_len ", b.max_side,
                     " and min_side_len ", b.min_side);
  if (rh * rw * c > kMaxOutput)
    return ctx.Error("image ", h, " x ", w, " scales to ", rh, " x ", rw, ", over the limit of ", kMaxOutput,
                     " elements");
  if (rh == h && rw == w) {
    SetKernelOutput(ctx, 0, image);
  } else {
    Tensor out = Tensor::Alloc(DType::kUInt8, {rh, rw, c});
    ResizeBilinear(ImageView{image.data<uint8_t>(), h, w, c}, rh, rw, out.mutable_data<uint8_t>());
    SetKernelOutput(ctx, 0, std::move(out));
  }
  if (ctx.outputs.size() > 1) {
    Tensor ratio = Tensor::Alloc(DType::kFloat32, {2});
    ratio.mutable_data<float>()[0] = static_cast<float>(static_cast<double>(h) / static_cast<double>(rh));
    ratio.mutable_data<float>()[1] = static_cast<float>(static_cast<double>(w) / static_cast<double>(rw));
    SetKernelOutput(ctx, 1, std::move(ratio));
  }
  return Status::Ok();
}

}  // namespace

SAMPAN_REGISTER_OP_DEF(
    {.domain = "sampan", .op_type = "ImageWithinBounds", .infer = InferImageWithinBounds, .run = RunImageWithinBounds});

}  // namespace sampan::ops
