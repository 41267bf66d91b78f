#include "ops/common.h"

#include <algorithm>

namespace sampan::ops {

Result<int64_t> NormalizeAxis(const InferContext& ctx, int64_t axis, int64_t rank) {
  const int64_t lo = -rank, hi = rank - 1;
  if (axis < lo || axis > hi)
    return ctx.Error("axis ", axis, " is out of range for rank ", rank, " (allowed ", lo, "..", hi, ")");
  return axis < 0 ? axis + rank : axis;
}

Shape StridesOf(const Shape& shape) {
  Shape s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

ir::Dims DimsOf(const Shape& shape) {
  ir::Dims d;
  d.reserve(shape.size());
  for (int64_t v : shape) d.push_back(ir::Dim::Known(v));
  return d;
}

Result<ir::Dims> BroadcastDims(const InferContext& ctx, const ir::Dims& a, const ir::Dims& b) {
  const size_t rank = std::max(a.size(), b.size());
  ir::Dims out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const ir::Dim* da = i < rank - a.size() ? nullptr : &a[i - (rank - a.size())];
    const ir::Dim* db = i < rank - b.size() ? nullptr : &b[i - (rank - b.size())];
    if (!da) {
      out[i] = *db;
      continue;
    }
    if (!db) {
      out[i] = *da;
      continue;
    }
    if (da->known() && db->known()) {
      if (da->value == db->value || db->value == 1)
        out[i] = *da;
      else if (da->value == 1)
        out[i] = *db;
      else
        return ctx.Error("cannot broadcast dimension ", da->value, " with ", db->value);
    } else if (da->known()) {
      out[i] = da->value == 1 ? *db : *da;
    } else if (db->known()) {
      out[i] = db->value == 1 ? *da : *db;
    } else {
      out[i] = (*da == *db) ? *da : ir::Dim::Unknown();
    }
  }
  return out;
}

Status InferBroadcastOutput(InferContext& ctx, DType dtype) {
  std::optional<ir::Dims> dims;
  bool first = true;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    if (!ctx.input_dims(i)) {
      ctx.set_output(0, dtype, std::nullopt);
      return Status::Ok();
    }
    if (first) {
      dims = ctx.input_dims(i);
      first = false;
    } else {
      SP_ASSIGN_OR_RETURN(dims, BroadcastDims(ctx, *dims, *ctx.input_dims(i)));
    }
  }
  ctx.set_output(0, dtype, dims);
  return Status::Ok();
}

Shape BroadcastShapes(const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const auto& s : shapes)
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      if (s[i] != 1) o = s[i];
    }
  return out;
}

Status ExpectDType(const InferContext& ctx, size_t i, std::initializer_list<DType> allowed) {
  DType t = ctx.input_dtype(i);
  for (DType a : allowed)
    if (a == t) return Status::Ok();
  return ctx.NotSupported("input ", i, " of type ", DTypeName(t));
}

Status ExpectSameDType(const InferContext& ctx, size_t a, size_t b) {
  if (ctx.input_dtype(a) != ctx.input_dtype(b))
    return ctx.Error("inputs ", a, " and ", b, " must have the same type, got ", DTypeName(ctx.input_dtype(a)), " and ",
                     DTypeName(ctx.input_dtype(b)));
  return Status::Ok();
}

Status UnifyDim(const InferContext& ctx, ir::Dim& slot, const ir::Dim& d, const char* what) {
  if (slot.known() && d.known() && slot.value != d.value)
    return ctx.Error(what, " is ", slot.value, " in one input and ", d.value, " in another");
  if (!slot.known() && (d.known() || (slot.param.empty() && !d.param.empty()))) slot = d;
  return Status::Ok();
}

}  // namespace sampan::ops
