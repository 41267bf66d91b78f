// Gather, GatherElements, GatherND. Indices may be negative (counted from the
// end); an out-of-range index is an InvalidArgument naming the node and index.
#include <cstring>

#include "ops/index_util.h"

namespace sampan::ops {
namespace {

// ---- Gather -------------------------------------------------------------------

Status InferGather(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  SP_RETURN_IF_ERROR(ExpectIndexType(ctx, 1));
  const DType dtype = ctx.input_dtype(0);
  const auto& data = ctx.input_dims(0);
  const auto& ind = ctx.input_dims(1);
  if (!data) {
    ctx.set_output(0, dtype, std::nullopt);
    return Status::Ok();
  }
  const int64_t rank = static_cast<int64_t>(data->size());
  if (rank == 0) return ctx.Error("data must have rank >= 1");
  SP_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().attr_int("axis", 0), rank));
  const ir::Dim& axis_dim = (*data)[static_cast<size_t>(axis)];
  if (const Tensor* iv = ctx.input_value(1); iv && axis_dim.known()) {
    for (int64_t i = 0; i < iv->numel(); ++i)
      if (!WrapIndex(IndexAt(*iv, i), axis_dim.value))
        return ctx.Error("index ", IndexAt(*iv, i), " is out of range for axis ", axis, " of size ", axis_dim.value);
  }
  if (!ind) {
    ctx.set_output(0, dtype, std::nullopt);
    return Status::Ok();
  }
  ir::Dims out(data->begin(), data->begin() + axis);
  out.insert(out.end(), ind->begin(), ind->end());
  out.insert(out.end(), data->begin() + axis + 1, data->end());
  ctx.set_output(0, dtype, std::move(out));
  return Status::Ok();
}

Status RunGather(KernelContext& ctx) {
  const Tensor& data = ctx.in(0);
  const Tensor& ind = ctx.in(1);
  Tensor& y = ctx.out(0);
  const int64_t axis = WrapAxis(ctx.node.attr_int("axis", 0), data.rank());
  const size_t a = static_cast<size_t>(axis);
  const int64_t outer = SpanProduct(data.shape(), 0, a);
  const int64_t n = data.dim(axis);
  const int64_t inner = SpanProduct(data.shape(), a + 1, data.shape().size());
  const int64_t count = ind.numel();
  std::vector<int64_t> idx(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    auto w = WrapIndex(IndexAt(ind, i), n);
    if (!w) return ctx.Error("index ", IndexAt(ind, i), " is out of range for axis ", axis, " of size ", n);
    idx[static_cast<size_t>(i)] = *w;
  }
  const size_t es = DTypeSize(data.dtype());
  const size_t row = static_cast<size_t>(inner) * es;
  const char* src = static_cast<const char*>(data.raw());
  char* dst = static_cast<char*>(y.mutable_raw());
  if (row == 0) return Status::Ok();
  for (int64_t o = 0; o < outer; ++o) {
    const char* base = src + static_cast<size_t>(o * n) * row;
    for (int64_t i = 0; i < count; ++i, dst += row) std::memcpy(dst, base + static_cast<size_t>(idx[i]) * row, row);
  }
  return Status::Ok();
}

// ---- GatherElements -------------------------------------------------------------

Status InferGatherElements(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  SP_RETURN_IF_ERROR(ExpectIndexType(ctx, 1));
  const auto& data = ctx.input_dims(0);
  const auto& ind = ctx.input_dims(1);
  if (data && ind) {
    if (data->size() != ind->size())
      return ctx.Error("data (rank ", data->size(), ") and indices (rank ", ind->size(), ") must have the same rank");
    if (data->empty()) return ctx.Error("data must have rank >= 1");
    SP_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().attr_int("axis", 0), data->size()));
    for (size_t d = 0; d < data->size(); ++d) {
      if (static_cast<int64_t>(d) == axis) continue;
      const ir::Dim &dd = (*data)[d], &id = (*ind)[d];
      if (dd.known() && id.known() && id.value > dd.value)
        return ctx.Error("indices dim ", d, " (", id.value, ") exceeds data dim (", dd.value, ")");
    }
  } else if (data || ind) {
    const auto& known = data ? data : ind;
    if (known->empty()) return ctx.Error("inputs must have rank >= 1");
    SP_RETURN_IF_ERROR(NormalizeAxis(ctx, ctx.node().attr_int("axis", 0), known->size()).status());
  }
  ctx.set_output(0, ctx.input_dtype(0), ind);
  return Status::Ok();
}

Status RunGatherElements(KernelContext& ctx) {
  const Tensor& data = ctx.in(0);
  const Tensor& ind = ctx.in(1);
  Tensor& y = ctx.out(0);
  const int64_t axis = WrapAxis(ctx.node.attr_int("axis", 0), data.rank());
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != axis && ind.dim(d) > data.dim(d))
      return ctx.Error("indices dim ", d, " (", ind.dim(d), ") exceeds data dim (", data.dim(d), ")");
  const Shape dstrides = StridesOf(data.shape());
  Shape walk = dstrides;
  walk[static_cast<size_t>(axis)] = 0;
  const int64_t n = data.dim(axis);
  const int64_t astride = dstrides[static_cast<size_t>(axis)];
  int64_t bad = 0;
  bool has_bad = false;
  DispatchBySize(DTypeSize(data.dtype()), [&]<class U>() {
    const U* src = static_cast<const U*>(data.raw());
    U* dst = static_cast<U*>(y.mutable_raw());
    ForEachOffset(ind.shape(), walk, [&](int64_t i, int64_t off) {
      const int64_t v = IndexAt(ind, i);
      auto w = WrapIndex(v, n);
      if (!w) {
        if (!has_bad) bad = v;
        has_bad = true;
        return;
      }
      dst[i] = src[off + *w * astride];
    });
  });
  if (has_bad) return ctx.Error("index ", bad, " is out of range for axis ", axis, " of size ", n);
  return Status::Ok();
}

// ---- GatherND ---------------------------------------------------------------------

Status InferGatherND(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  SP_RETURN_IF_ERROR(ExpectIndexType(ctx, 1));
  const DType dtype = ctx.input_dtype(0);
  const int64_t b = ctx.node().attr_int("batch_dims", 0);
  if (b < 0) return ctx.Error("batch_dims must be >= 0, got ", b);
  const auto& data = ctx.input_dims(0);
  const auto& ind = ctx.input_dims(1);
  if (data && static_cast<int64_t>(data->size()) <= b)
    return ctx.Error("data rank ", data->size(), " must be greater than batch_dims ", b);
  if (ind && static_cast<int64_t>(ind->size()) <= b)
    return ctx.Error("indices rank ", ind->size(), " must be greater than batch_dims ", b);
  if (!data || !ind || !ind->back().known()) {
    ctx.set_output(0, dtype, std::nullopt);
    return Status::Ok();
  }
  const int64_t r = static_cast<int64_t>(data->size());
  const int64_t last = ind->back().value;
  if (last < 1 || last > r - b)
    return ctx.Error("indices last dim ", last, " must be in [1, ", r - b, "] (data rank ", r, ", batch_dims ", b, ")");
  for (int64_t d = 0; d < b; ++d) {
    const ir::Dim &dd = (*data)[d], &id = (*ind)[d];
    if (dd.known() && id.known() && dd.value != id.value)
      return ctx.Error("batch dim ", d, " differs: data ", dd.value, ", indices ", id.value);
  }
  ir::Dims out(ind->begin(), ind->end() - 1);
  for (int64_t d = 0; d < b; ++d)
    if (!out[d].known() && (*data)[d].known()) out[d] = (*data)[d];
  out.insert(out.end(), data->begin() + b + last, data->end());
  ctx.set_output(0, dtype, std::move(out));
  return Status::Ok();
}

Status RunGatherND(KernelContext& ctx) {
  const Tensor& data = ctx.in(0);
  const Tensor& ind = ctx.in(1);
  const size_t b = static_cast<size_t>(ctx.node.attr_int("batch_dims", 0));
  const size_t r = data.shape().size(), q = ind.shape().size();
  const int64_t last = ind.shape().back();
  for (size_t d = 0; d < b; ++d)
    if (data.dim(d) != ind.dim(d))
      return ctx.Error("batch dim ", d, " differs: data ", data.dim(d), ", indices ", ind.dim(d));
  Tensor& y = ctx.out(0);
  const int64_t batches = SpanProduct(data.shape(), 0, b);
  const int64_t per_batch = SpanProduct(ind.shape(), b, q - 1);
  const int64_t slice = SpanProduct(data.shape(), b + static_cast<size_t>(last), r);
  const int64_t batch_stride = SpanProduct(data.shape(), b, r);
  const size_t es = DTypeSize(data.dtype());
  const char* src = static_cast<const char*>(data.raw());
  char* dst = static_cast<char*>(y.mutable_raw());
  const size_t row = static_cast<size_t>(slice) * es;
  for (int64_t bi = 0; bi < batches; ++bi) {
    for (int64_t n = 0; n < per_batch; ++n) {
      const int64_t base = (bi * per_batch + n) * last;
      int64_t off = 0;
      for (int64_t k = 0; k < last; ++k) {
        const size_t dim = b + static_cast<size_t>(k);
        const int64_t v = IndexAt(ind, base + k);
        auto w = WrapIndex(v, data.dim(dim));
        if (!w) return ctx.Error("index ", v, " is out of range for data dim ", dim, " of size ", data.dim(dim));
        off = off * data.dim(dim) + *w;
      }
      off *= slice;
      if (row) std::memcpy(dst, src + static_cast<size_t>(bi * batch_stride + off) * es, row);
      dst += row;
    }
  }
  return Status::Ok();
}

SAMPAN_REGISTER_OP("Gather", InferGather, RunGather);
SAMPAN_REGISTER_OP("GatherElements", InferGatherElements, RunGatherElements);
SAMPAN_REGISTER_OP("GatherND", InferGatherND, RunGatherND);

}  // namespace
}  // namespace sampan::ops
