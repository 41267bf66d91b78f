// CenterCropPad (opset 18): each listed axis cropped or zero-padded to its target length,
// centred (a crop drops floor(d/2) elements in front, a pad adds floor(d/2) zeros there,
// d being the length difference).
#include <cstring>

#include "ops/common.h"
#include "ops/index_util.h"

namespace sampan::ops {
namespace {

// The axes CenterCropPad resizes (attribute `axes`, default all), normalised; an error
// for a repeated or out-of-range axis.
Result<std::vector<int64_t>> CropAxes(const InferContext& ctx, int64_t rank) {
  std::vector<int64_t> axes = ctx.node().attr_ints("axes");
  if (!ctx.node().has_attr("axes"))
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t& a : axes) {
    SP_ASSIGN_OR_RETURN(a, NormalizeAxis(ctx, a, rank));
    if (seen[static_cast<size_t>(a)]) return ctx.Error("axis ", a, " is listed twice");
    seen[static_cast<size_t>(a)] = true;
  }
  return axes;
}

Status InferCenterCropPad(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  if (ctx.input_dtype(1) != DType::kInt32 && ctx.input_dtype(1) != DType::kInt64)
    return ctx.Error("shape must be int32 or int64, got ", DTypeName(ctx.input_dtype(1)));
  const auto& in = ctx.input_dims(0);
  if (!in) return ctx.NotSupported("input of unknown rank");
  const int64_t rank = static_cast<int64_t>(in->size());
  SP_ASSIGN_OR_RETURN(std::vector<int64_t> axes, CropAxes(ctx, rank));
  if (ctx.input_rank(1) > 1) return ctx.Error("shape must be 1-D");
  ir::Dims out = *in;
  const Tensor* shape = ctx.input_value(1);
  if (shape) {
    SP_ASSIGN_OR_RETURN(std::vector<int64_t> target, ToInt64Vector(*shape, "shape"));
    if (target.size() != axes.size())
      return ctx.Error("shape has ", target.size(), " values for ", axes.size(), " axes");
    for (size_t i = 0; i < axes.size(); ++i) {
      if (target[i] < 0) return ctx.Error("target length ", target[i], " < 0 on axis ", axes[i]);
      out[static_cast<size_t>(axes[i])] = ir::Dim::Known(target[i]);
    }
  } else {
    for (int64_t a : axes) out[static_cast<size_t>(a)] = ir::Dim::Unknown();
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
  return Status::Ok();
}

Status RunCenterCropPad(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const Shape& xs = x.shape();
  const Shape& ys = y.shape();
  const size_t rank = xs.size();
  // Per axis: y index o reads x index o + shift (negative shift: padding in front).
  std::vector<int64_t> shift(rank, 0);
  for (size_t a = 0; a < rank; ++a) {
    const int64_t d = xs[a] - ys[a];
    shift[a] = d >= 0 ? d / 2 : -((-d) / 2);
  }
  const Shape xst = StridesOf(xs);
  const size_t elem = DTypeSize(x.dtype());
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.mutable_raw());
  std::memset(dst, 0, y.nbytes());
  std::vector<int64_t> idx(rank, 0);
  const int64_t total = y.numel();
  for (int64_t i = 0; i < total; ++i) {
    int64_t off = 0;
    bool inside = true;
    for (size_t a = 0; a < rank && inside; ++a) {
      const int64_t s = idx[a] + shift[a];
      inside = s >= 0 && s < xs[a];
      off += s * xst[a];
    }
    if (inside) std::memcpy(dst + static_cast<size_t>(i) * elem, src + static_cast<size_t>(off) * elem, elem);
    for (size_t a = rank; a-- > 0;) {
      if (++idx[a] < ys[a]) break;
      idx[a] = 0;
    }
  }
  return Status::Ok();
}

SAMPAN_REGISTER_OP("CenterCropPad", InferCenterCropPad, RunCenterCropPad);

}  // namespace
}  // namespace sampan::ops
