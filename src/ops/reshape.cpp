// Reshape, Flatten, Squeeze, Unsqueeze: ops that change only the shape. The
// kernels alias the input's storage under the inferred shape (no copy).
#include <algorithm>
#include <set>

#include "ops/common.h"
#include "ops/shape_util.h"

namespace sampan::ops {
namespace {

// All four kernels: the output is the input's data under the inferred (static) shape.
Status RunAlias(KernelContext& ctx) {
  const ir::TensorType& t = ctx.infer->output(0);
  if (!t.is_static()) return Internal(ctx.node.Label(), ": output shape not known at run time");
  ctx.out(0) = ctx.in(0).Reshaped(t.static_shape());
  return Status::Ok();
}

// ---------------------------------------------------------------- Reshape

// Output dims of Reshape(data dims `in`, target `shape`).
Result<ir::Dims> ReshapeDims(const InferContext& ctx, const std::optional<ir::Dims>& in,
                             const std::vector<int64_t>& shape, bool allowzero) {
  int infer_at = -1;
  bool has_zero = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < -1) return ctx.Error("shape[", i, "] = ", shape[i], " is invalid (must be >= -1)");
    if (shape[i] == -1) {
      if (infer_at >= 0) return ctx.Error("shape has more than one -1 entry");
      infer_at = static_cast<int>(i);
    }
    has_zero |= shape[i] == 0;
  }
  if (allowzero && has_zero && infer_at >= 0) return ctx.Error("shape may not contain both 0 and -1 when allowzero=1");

  ir::Dims out(shape.size());
  std::vector<bool> copied(in ? in->size() : 0, false);
  int64_t out_prod = 1;  // product of the explicitly given sizes
  for (size_t i = 0; i < shape.size(); ++i) {
    if (static_cast<int>(i) == infer_at) continue;
    if (shape[i] == 0 && !allowzero) {
      if (!in) {
        out[i] = ir::Dim::Unknown();
        continue;
      }
      if (i >= in->size())
        return ctx.Error("shape[", i, "] = 0 copies input dimension ", i, " but the input has rank ", in->size());
      out[i] = (*in)[i];
      copied[i] = true;
    } else {
      out[i] = ir::Dim::Known(shape[i]);
      if (__builtin_mul_overflow(out_prod, shape[i], &out_prod))
        return ctx.Error("shape has more elements than an int64 can count");
    }
  }
  if (!in) {
    if (infer_at >= 0) out[static_cast<size_t>(infer_at)] = ir::Dim::Unknown();
    return out;
  }
  // The input dims not copied through by a 0 must account for the rest of the output.
  int64_t in_prod = 1;
  std::vector<const ir::Dim*> in_unknown;
  for (size_t i = 0; i < in->size(); ++i) {
    if (copied[i]) continue;
    if (!(*in)[i].known())
      in_unknown.push_back(&(*in)[i]);
    else if (__builtin_mul_overflow(in_prod, (*in)[i].value, &in_prod))
      return ctx.Error("the input has more elements than an int64 can count");
  }
  if (infer_at >= 0) {
    ir::Dim& d = out[static_cast<size_t>(infer_at)];
    if (in_unknown.empty()) {
      if (out_prod == 0) {
        if (in_prod != 0) return ctx.Error("cannot reshape ", in_prod, " elements with a 0 in the target shape");
        d = ir::Dim::Known(0);  // ambiguous; ONNX Runtime picks 0 as well
      } else {
        if (in_prod % out_prod != 0)
          return ctx.Error("cannot reshape input with ", in_prod, " elements into a multiple of ", out_prod);
        d = ir::Dim::Known(in_prod / out_prod);
      }
    } else if (in_unknown.size() == 1 && in_prod == out_prod) {
      d = *in_unknown[0];  // e.g. [N,3,4] -> [-1,3,4] keeps N
    } else {
      d = ir::Dim::Unknown();
    }
  } else if (in_unknown.empty()) {
    // Remaining output dims are all known here unless copied (excluded above).
    if (in_prod != out_prod)
      return ctx.Error("cannot reshape input with ", in_prod, " elements into shape with ", out_prod,
                       " elements (after copied dims)");
  }
  return out;
}

Status InferReshape(InferContext& ctx) {
  const bool shape_attr = ctx.opset() < 5;
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(shape_attr ? 1 : 2, shape_attr ? 1 : 2));
  SP_RETURN_IF_ERROR(ExpectStorableInput(ctx, 0));
  const DType dt = ctx.input_dtype(0);
  const bool allowzero = ctx.opset() >= 14 && ctx.node().attr_int("allowzero", 0) != 0;
  std::vector<int64_t> shape;
  if (shape_attr) {
    SP_ASSIGN_OR_RETURN(shape, ctx.node().required_ints("shape"));
  } else {
    if (ctx.input_dtype(1) != DType::kInt64)
      return ctx.Error("shape input must be int64, got ", DTypeName(ctx.input_dtype(1)));
    if (ctx.input_rank(1) > 1) return ctx.Error("shape input must be 1-D");
    const Tensor* v = ctx.input_value(1);
    if (v == nullptr) {
      int64_t n = StaticLength1D(ctx, 1);
      ctx.set_output(0, dt, n >= 0 ? std::optional<ir::Dims>(UnknownDims(n)) : std::nullopt);
      return Status::Ok();
    }
    SP_ASSIGN_OR_RETURN(shape, ReadInts(ctx, *v, "shape"));
  }
  SP_ASSIGN_OR_RETURN(ir::Dims out, ReshapeDims(ctx, ctx.input_dims(0), shape, allowzero));
  ctx.set_output(0, dt, std::move(out));
  return Status::Ok();
}

// ---------------------------------------------------------------- Flatten

Status InferFlatten(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectStorableInput(ctx, 0));
  const DType dt = ctx.input_dtype(0);
  const int64_t axis_attr = ctx.node().attr_int("axis", 1);
  const auto& in = ctx.input_dims(0);
  if (!in) {
    ctx.set_output(0, dt, UnknownDims(2));
    return Status::Ok();
  }
  const int64_t r = static_cast<int64_t>(in->size());
  if (axis_attr < -r || axis_attr > r)
    return ctx.Error("axis ", axis_attr, " is out of range for rank ", r, " (allowed ", -r, "..", r, ")");
  const int64_t axis = axis_attr < 0 ? axis_attr + r : axis_attr;
  auto group = [&](int64_t lo, int64_t hi) {
    if (hi - lo == 1) return (*in)[static_cast<size_t>(lo)];
    int64_t p = 1;
    for (int64_t i = lo; i < hi; ++i) {
      const ir::Dim& d = (*in)[static_cast<size_t>(i)];
      if (!d.known()) return ir::Dim::Unknown();
      p *= d.value;
    }
    return ir::Dim::Known(p);
  };
  ctx.set_output(0, dt, ir::Dims{group(0, axis), group(axis, r)});
  return Status::Ok();
}

// ---------------------------------------------------------------- Squeeze / Unsqueeze

// Reads `axes` (attribute before opset 13, input 1 from 13). *known = false when
// the axes are an input whose value is not known; *given = false when absent.
Status ReadAxes(const InferContext& ctx, std::vector<int64_t>* axes, bool* known, bool* given) {
  *known = true;
  *given = false;
  if (ctx.opset() < 13) {
    if (ctx.node().has_attr("axes")) {
      *axes = ctx.node().attr_ints("axes");
      *given = true;
    }
    return Status::Ok();
  }
  if (!ctx.has_input(1)) return Status::Ok();
  *given = true;
  if (ctx.input_dtype(1) != DType::kInt64) return ctx.Error("axes input must be int64");
  const Tensor* v = ctx.input_value(1);
  if (v == nullptr) {
    *known = false;
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(*axes, ReadInts(ctx, *v, "axes"));
  return Status::Ok();
}

Result<std::vector<bool>> AxisMask(const InferContext& ctx, const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<bool> mask(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    SP_ASSIGN_OR_RETURN(int64_t n, NormalizeAxis(ctx, a, rank));
    if (mask[static_cast<size_t>(n)]) return ctx.Error("axis ", a, " is repeated in axes");
    mask[static_cast<size_t>(n)] = true;
  }
  return mask;
}

Status InferSqueeze(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, ctx.opset() < 13 ? 1 : 2));
  SP_RETURN_IF_ERROR(ExpectStorableInput(ctx, 0));
  const DType dt = ctx.input_dtype(0);
  std::vector<int64_t> axes;
  bool known, given;
  SP_RETURN_IF_ERROR(ReadAxes(ctx, &axes, &known, &given));
  const auto& in = ctx.input_dims(0);
  if (!in) {
    ctx.set_output(0, dt, std::nullopt);
    return Status::Ok();
  }
  const int64_t r = static_cast<int64_t>(in->size());
  if (!known) {
    int64_t n = StaticLength1D(ctx, 1);
    ctx.set_output(0, dt, n >= 0 && n <= r ? std::optional<ir::Dims>(UnknownDims(r - n)) : std::nullopt);
    return Status::Ok();
  }
  ir::Dims out;
  if (given) {
    SP_ASSIGN_OR_RETURN(std::vector<bool> mask, AxisMask(ctx, axes, r));
    for (int64_t i = 0; i < r; ++i) {
      const ir::Dim& d = (*in)[static_cast<size_t>(i)];
      if (!mask[static_cast<size_t>(i)]) {
        out.push_back(d);
      } else if (d.known() && d.value != 1) {
        return ctx.Error("cannot squeeze axis ", i, " of size ", d.value, " (must be 1)");
      }
    }
  } else {
    for (const ir::Dim& d : *in) {
      if (!d.known()) {  // might or might not be 1: rank unknown
        ctx.set_output(0, dt, std::nullopt);
        return Status::Ok();
      }
      if (d.value != 1) out.push_back(d);
    }
  }
  ctx.set_output(0, dt, std::move(out));
  return Status::Ok();
}

Status InferUnsqueeze(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(ctx.opset() < 13 ? 1 : 2, ctx.opset() < 13 ? 1 : 2));
  SP_RETURN_IF_ERROR(ExpectStorableInput(ctx, 0));
  const DType dt = ctx.input_dtype(0);
  std::vector<int64_t> axes;
  bool known, given;
  SP_RETURN_IF_ERROR(ReadAxes(ctx, &axes, &known, &given));
  if (!given) return ctx.Error("missing required attribute 'axes'");
  const auto& in = ctx.input_dims(0);
  if (!known) {
    int64_t n = StaticLength1D(ctx, 1);
    ctx.set_output(
        0, dt,
        in && n >= 0 ? std::optional<ir::Dims>(UnknownDims(static_cast<int64_t>(in->size()) + n)) : std::nullopt);
    return Status::Ok();
  }
  if (!in) {
    ctx.set_output(0, dt, std::nullopt);
    return Status::Ok();
  }
  const int64_t out_rank = static_cast<int64_t>(in->size() + axes.size());
  SP_ASSIGN_OR_RETURN(std::vector<bool> mask, AxisMask(ctx, axes, out_rank));
  ir::Dims out;
  size_t next = 0;
  for (int64_t i = 0; i < out_rank; ++i)
    out.push_back(mask[static_cast<size_t>(i)] ? ir::Dim::Known(1) : (*in)[next++]);
  ctx.set_output(0, dt, std::move(out));
  return Status::Ok();
}

SAMPAN_REGISTER_OP_DEF({.domain = "", .op_type = "Reshape", .infer = InferReshape, .run = RunAlias, .strings = true});
SAMPAN_REGISTER_OP_DEF({.domain = "", .op_type = "Flatten", .infer = InferFlatten, .run = RunAlias, .strings = true});
SAMPAN_REGISTER_OP_DEF({.domain = "", .op_type = "Squeeze", .infer = InferSqueeze, .run = RunAlias, .strings = true});
SAMPAN_REGISTER_OP_DEF(
    {.domain = "", .op_type = "Unsqueeze", .infer = InferUnsqueeze, .run = RunAlias, .strings = true});

}  // namespace
}  // namespace sampan::ops
