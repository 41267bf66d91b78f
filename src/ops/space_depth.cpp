// DepthToSpace and SpaceToDepth on NCHW tensors. Both order the channel of a
// block as DCR (block row, block column, depth) or CRD (depth, block row, block
// column); SpaceToDepth has the `mode` attribute from opset 28 (DCR before).
#include "ops/index_util.h"

namespace sampan::ops {
namespace {

Result<int64_t> BlockSize(const InferContext& ctx) {
  SP_ASSIGN_OR_RETURN(int64_t b, ctx.node().required_int("blocksize"));
  if (b < 1) return ctx.Error("blocksize must be >= 1, got ", b);
  return b;
}

Status CheckMode(const InferContext& ctx) {
  const std::string mode = ctx.node().attr_string("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") return ctx.Error("mode must be DCR or CRD, got '", mode, "'");
  return Status::Ok();
}

Status InferDepthToSpace(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  SP_ASSIGN_OR_RETURN(int64_t b, BlockSize(ctx));
  SP_RETURN_IF_ERROR(CheckMode(ctx));
  const auto& in = ctx.input_dims(0);
  if (!in) {
    ctx.set_output(0, ctx.input_dtype(0), UnknownDims(4));
    return Status::Ok();
  }
  if (in->size() != 4) return ctx.Error("input must be 4-D (NCHW), got rank ", in->size());
  ir::Dims out = *in;
  if (out[1].known()) {
    if (out[1].value % (b * b) != 0)
      return ctx.Error("channels ", out[1].value, " not divisible by blocksize^2 = ", b * b);
    out[1] = ir::Dim::Known(out[1].value / (b * b));
  } else if (b != 1) {
    out[1] = ir::Dim::Unknown();
  }
  for (size_t d = 2; d < 4; ++d)
    if (b != 1) out[d] = out[d].known() ? ir::Dim::Known(out[d].value * b) : ir::Dim::Unknown();
  ctx.set_output(0, ctx.input_dtype(0), std::move(out));
  return Status::Ok();
}

Status RunDepthToSpace(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const int64_t b = ctx.node.attr_int("blocksize", 1);
  const bool crd = ctx.node.attr_string("mode", "DCR") == "CRD";
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t oc = C / (b * b), OH = H * b, OW = W * b;
  DispatchBySize(DTypeSize(x.dtype()), [&]<class U>() {
    const U* src = static_cast<const U*>(x.raw());
    U* dst = static_cast<U*>(y.mutable_raw());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < oc; ++c)
        for (int64_t oh = 0; oh < OH; ++oh) {
          const int64_t h = oh / b, i = oh % b;
          U* o = dst + ((n * oc + c) * OH + oh) * OW;
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t w = ow / b, j = ow % b;
            const int64_t ic = crd ? (c * b + i) * b + j : (i * b + j) * oc + c;
            o[ow] = src[((n * C + ic) * H + h) * W + w];
          }
        }
  });
  return Status::Ok();
}

Status InferSpaceToDepth(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  SP_ASSIGN_OR_RETURN(int64_t b, BlockSize(ctx));
  if (ctx.node().has_attr("mode") && ctx.opset() < 28)
    return ctx.Error("attribute 'mode' of SpaceToDepth needs opset 28 (the model imports opset ", ctx.opset(), ")");
  SP_RETURN_IF_ERROR(CheckMode(ctx));
  const auto& in = ctx.input_dims(0);
  if (!in) {
    ctx.set_output(0, ctx.input_dtype(0), UnknownDims(4));
    return Status::Ok();
  }
  if (in->size() != 4) return ctx.Error("input must be 4-D (NCHW), got rank ", in->size());
  ir::Dims out = *in;
  if (b != 1) out[1] = out[1].known() ? ir::Dim::Known(out[1].value * b * b) : ir::Dim::Unknown();
  for (size_t d = 2; d < 4; ++d) {
    if (out[d].known()) {
      if (out[d].value % b != 0)
        return ctx.Error("spatial dim ", d, " (", out[d].value, ") not divisible by blocksize ", b);
      out[d] = ir::Dim::Known(out[d].value / b);
    } else if (b != 1) {
      out[d] = ir::Dim::Unknown();
    }
  }
  ctx.set_output(0, ctx.input_dtype(0), std::move(out));
  return Status::Ok();
}

Status RunSpaceToDepth(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const int64_t b = ctx.node.attr_int("blocksize", 1);
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t OH = H / b, OW = W / b, OC = C * b * b;
  const bool crd = ctx.node.attr_string("mode", "DCR") == "CRD";
  DispatchBySize(DTypeSize(x.dtype()), [&]<class U>() {
    const U* src = static_cast<const U*>(x.raw());
    U* dst = static_cast<U*>(y.mutable_raw());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t oh = h / b, i = h % b;
          const U* s = src + ((n * C + c) * H + h) * W;
          for (int64_t w = 0; w < W; ++w) {
            const int64_t ow = w / b, j = w % b;
            const int64_t ocn = crd ? (c * b + i) * b + j : (i * b + j) * C + c;
            dst[((n * OC + ocn) * OH + oh) * OW + ow] = s[w];
          }
        }
  });
  return Status::Ok();
}

SAMPAN_REGISTER_OP("DepthToSpace", InferDepthToSpace, RunDepthToSpace);
SAMPAN_REGISTER_OP("SpaceToDepth", InferSpaceToDepth, RunSpaceToDepth);

}  // namespace
}  // namespace sampan::ops
