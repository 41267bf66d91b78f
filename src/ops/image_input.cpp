// sampan::ImageInput: raw 8-bit images in, normalised network input out.
//   Y[n, c, h, w] = (X[n, h, w, c] - mean[c]) * scale[c]      (layout "NCHW", the default)
//   Y[n, h, w, c] = (X[n, h, w, c] - mean[c]) * scale[c]      (layout "NHWC")
// X: uint8 [N, H, W, C]; Y: attribute `to` (float32 by default, float16, bfloat16).
// `sampan build --input-format uint8-nhwc --mean .. --std ..` puts this op in
// front of an image input (scale = 1/std), so clients send a quarter of the
// bytes and do no preprocessing; backends run it as one fused kernel.
#include "ops/common.h"

namespace sampan::ops {

namespace {

Status InferImageInput(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  if (ctx.input_dtype(0) != DType::kUInt8)
    return ctx.Error("input must be uint8 (got ", DTypeName(ctx.input_dtype(0)), ")");
  const auto& n = ctx.node();
  const std::string layout = n.attr_string("layout", "NCHW");
  if (layout != "NCHW" && layout != "NHWC") return ctx.Error("layout must be NCHW or NHWC (got '", layout, "')");
  const DType to = static_cast<DType>(n.attr_int("to", static_cast<int64_t>(DType::kFloat32)));
  if (to != DType::kFloat32 && to != DType::kFloat16 && to != DType::kBFloat16)
    return ctx.NotSupported("output type ", DTypeName(to), " (float32, float16 or bfloat16)");
  const auto mean = n.attr_floats("mean");
  const auto scale = n.attr_floats("scale");
  if (mean.empty() || mean.size() != scale.size())
    return ctx.Error("mean and scale need one value per channel (got ", mean.size(), " and ", scale.size(), ")");
  const auto& dims = ctx.input_dims(0);
  if (!dims) {
    ctx.set_output(0, to, std::nullopt);
    return Status::Ok();
  }
  if (dims->size() != 4) return ctx.Error("input must be [N, H, W, C] (rank ", dims->size(), ")");
  const ir::Dim& c = (*dims)[3];
  if (c.known() && c.value != static_cast<int64_t>(mean.size()))
    return ctx.Error("input has ", c.value, " channels but mean/scale have ", mean.size(), " values");
  ir::Dims out = layout == "NCHW" ? ir::Dims{(*dims)[0], (*dims)[3], (*dims)[1], (*dims)[2]} : *dims;
  ctx.set_output(0, to, out);
  return Status::Ok();
}

Status RunImageInput(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const auto mean = ctx.node.attr_floats("mean");
  const auto scale = ctx.node.attr_floats("scale");
  const bool nchw = ctx.node.attr_string("layout", "NCHW") == "NCHW";
  const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), C = x.dim(3);
  Tensor& y = ctx.out(0);
  const uint8_t* src = x.data<uint8_t>();
  return DispatchDType(y.dtype(), [&]<class T>() {
    T* dst = y.mutable_data<T>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          for (int64_t c = 0; c < C; ++c) {
            const float v = (static_cast<float>(src[((n * H + h) * W + w) * C + c]) - mean[c]) * scale[c];
            const int64_t o = nchw ? ((n * C + c) * H + h) * W + w : ((n * H + h) * W + w) * C + c;
            dst[o] = static_cast<T>(v);
          }
  });
}

}  // namespace

SAMPAN_REGISTER_DOMAIN_OP("sampan", "ImageInput", InferImageInput, RunImageInput);

}  // namespace sampan::ops
