// Slice: attributes starts/ends/axes before opset 10; inputs starts, ends,
// axes, steps from 10. Negative steps, clamping and INT_MAX/INT_MIN ends.
#include <algorithm>
#include <limits>

#include "ops/common.h"
#include "ops/shape_util.h"

namespace sampan::ops {
namespace {

// Raw slice arguments (not yet normalized against a shape).
struct SliceArgs {
  bool known = true;  //!< false when a value input is not known
  bool axes_known = true;
  std::vector<int64_t> starts, ends, axes, steps;
};

Result<SliceArgs> ReadSliceArgs(const InferContext& ctx) {
  SliceArgs a;
  const ir::Node& node = ctx.node();
  if (ctx.opset() < 10) {
    SP_ASSIGN_OR_RETURN(a.starts, node.required_ints("starts"));
    SP_ASSIGN_OR_RETURN(a.ends, node.required_ints("ends"));
    if (node.has_attr("axes")) {
      a.axes = node.attr_ints("axes");
    } else {
      for (size_t i = 0; i < a.starts.size(); ++i) a.axes.push_back(static_cast<int64_t>(i));
    }
    a.steps.assign(a.starts.size(), 1);
  } else {
    for (size_t i = 1; i < 5; ++i)
      if (ctx.has_input(i) && ctx.input_dtype(i) != DType::kInt64 && ctx.input_dtype(i) != DType::kInt32)
        return ctx.Error("input ", i, " must be int32 or int64, got ", DTypeName(ctx.input_dtype(i)));
    const Tensor* s = ctx.input_value(1);
    const Tensor* e = ctx.input_value(2);
    const Tensor* ax = ctx.input_value(3);
    const Tensor* st = ctx.input_value(4);
    a.axes_known = !ctx.has_input(3) || ax != nullptr;
    if (a.axes_known && ax != nullptr) {
      SP_ASSIGN_OR_RETURN(a.axes, ReadInts(ctx, *ax, "axes"));
    }
    if (s == nullptr || e == nullptr || (ctx.has_input(4) && st == nullptr) || !a.axes_known) {
      a.known = false;
      return a;
    }
    SP_ASSIGN_OR_RETURN(a.starts, ReadInts(ctx, *s, "starts"));
    SP_ASSIGN_OR_RETURN(a.ends, ReadInts(ctx, *e, "ends"));
    if (ax == nullptr)
      for (size_t i = 0; i < a.starts.size(); ++i) a.axes.push_back(static_cast<int64_t>(i));
    if (st != nullptr) {
      SP_ASSIGN_OR_RETURN(a.steps, ReadInts(ctx, *st, "steps"));
    } else {
      a.steps.assign(a.starts.size(), 1);
    }
  }
  if (a.ends.size() != a.starts.size() || a.axes.size() != a.starts.size() || a.steps.size() != a.starts.size())
    return ctx.Error("starts, ends, axes and steps must have the same length (got ", a.starts.size(), ", ",
                     a.ends.size(), ", ", a.axes.size(), ", ", a.steps.size(), ")");
  for (int64_t s : a.steps)
    if (s == 0) return ctx.Error("steps must not be 0");
  return a;
}

// Per-axis start, step and output length for a known dim size.
struct AxisSlice {
  int64_t start = 0, step = 1, len = 0;
};

AxisSlice ResolveAxis(int64_t dim, int64_t start, int64_t end, int64_t step) {
  AxisSlice r{0, step, 0};
  if (dim == 0) return r;
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    r.len = end > start ? (end - start + step - 1) / step : 0;
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    r.len = start > end ? (start - end + (-step) - 1) / (-step) : 0;
  }
  r.start = start;
  return r;
}

// Normalizes axes against `rank`; per-dim index into args, -1 when not sliced.
Result<std::vector<int>> AxisIndex(const InferContext& ctx, const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int> which(static_cast<size_t>(rank), -1);
  for (size_t i = 0; i < axes.size(); ++i) {
    SP_ASSIGN_OR_RETURN(int64_t a, NormalizeAxis(ctx, axes[i], rank));
    if (which[static_cast<size_t>(a)] >= 0) return ctx.Error("axis ", axes[i], " is repeated in axes");
    which[static_cast<size_t>(a)] = static_cast<int>(i);
  }
  return which;
}

Status InferSlice(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.opset() < 10 ? ctx.ExpectInputs(1, 1) : ctx.ExpectInputs(3, 5));
  SP_RETURN_IF_ERROR(ExpectStorableInput(ctx, 0));
  const DType dt = ctx.input_dtype(0);
  SP_ASSIGN_OR_RETURN(SliceArgs a, ReadSliceArgs(ctx));
  const auto& in = ctx.input_dims(0);
  if (!in) {
    ctx.set_output(0, dt, std::nullopt);
    return Status::Ok();
  }
  const int64_t rank = static_cast<int64_t>(in->size());
  if (!a.known) {
    ir::Dims out = *in;
    if (!a.axes_known || !ctx.has_input(3)) {
      // Which axes are sliced is unknown (default axes depend on the starts' length).
      out = UnknownDims(rank);
    } else {
      SP_ASSIGN_OR_RETURN(std::vector<int> which, AxisIndex(ctx, a.axes, rank));
      for (int64_t d = 0; d < rank; ++d)
        if (which[static_cast<size_t>(d)] >= 0) out[static_cast<size_t>(d)] = ir::Dim::Unknown();
    }
    ctx.set_output(0, dt, std::move(out));
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(std::vector<int> which, AxisIndex(ctx, a.axes, rank));
  ir::Dims out = *in;
  constexpr int64_t kBig = std::numeric_limits<int32_t>::max();
  for (int64_t d = 0; d < rank; ++d) {
    const int w = which[static_cast<size_t>(d)];
    if (w < 0) continue;
    const size_t k = static_cast<size_t>(w);
    const ir::Dim& dim = (*in)[static_cast<size_t>(d)];
    ir::Dim& o = out[static_cast<size_t>(d)];
    if (dim.known()) {
      o = ir::Dim::Known(ResolveAxis(dim.value, a.starts[k], a.ends[k], a.steps[k]).len);
    } else if (a.steps[k] == 1 && a.starts[k] == 0 && a.ends[k] >= kBig) {
      o = dim;  // the whole axis
    } else if (a.steps[k] == -1 && (a.starts[k] == -1 || a.starts[k] >= kBig) && a.ends[k] <= -kBig) {
      o = dim;  // the whole axis, reversed
    } else {
      o = ir::Dim::Unknown();
    }
  }
  ctx.set_output(0, dt, std::move(out));
  return Status::Ok();
}

Status RunSlice(KernelContext& ctx) {
  const InferContext& ictx = *ctx.infer;
  SP_ASSIGN_OR_RETURN(SliceArgs a, ReadSliceArgs(ictx));
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  SP_ASSIGN_OR_RETURN(std::vector<int> which, AxisIndex(ictx, a.axes, x.rank()));
  const Shape in_strides = StridesOf(x.shape());
  Shape strides = in_strides;
  int64_t offset = 0;
  for (int64_t d = 0; d < x.rank(); ++d) {
    const int w = which[static_cast<size_t>(d)];
    if (w < 0) continue;
    const size_t k = static_cast<size_t>(w);
    AxisSlice s = ResolveAxis(x.dim(d), a.starts[k], a.ends[k], a.steps[k]);
    offset += s.start * in_strides[static_cast<size_t>(d)];
    strides[static_cast<size_t>(d)] *= s.step;
  }
  StridedCopy(x.raw(), y.mutable_raw(), DTypeSize(x.dtype()), y.shape(), strides, offset);
  return Status::Ok();
}

SAMPAN_REGISTER_OP("Slice", InferSlice, RunSlice);

}  // namespace
}  // namespace sampan::ops
