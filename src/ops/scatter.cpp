// ScatterElements (and its opset 9-10 name Scatter), ScatterND. Output = a copy
// of data with updates written (or reduced: add/mul/max/min) at the indexed places.
// Out-of-range indices are an InvalidArgument naming the node and index.
#include <algorithm>
#include <cstring>

#include "ops/index_util.h"

namespace sampan::ops {
namespace {

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

Result<Reduction> ParseReduction(const ir::Node& node) {
  const std::string r = node.attr_string("reduction", "none");
  if (r == "none") return Reduction::kNone;
  if (r == "add") return Reduction::kAdd;
  if (r == "mul") return Reduction::kMul;
  if (r == "max") return Reduction::kMax;
  if (r == "min") return Reduction::kMin;
  return InvalidArgument(node.Label(), ": unknown reduction '", r, "' (expected none, add, mul, max or min)");
}

Status CheckReductionType(const InferContext& ctx, Reduction red) {
  if (red != Reduction::kNone && ctx.input_dtype(0) == DType::kBool)
    return ctx.NotSupported("reduction '", ctx.node().attr_string("reduction", "none"), "' on bool data");
  return Status::Ok();
}

template <class T>
inline void Combine(T& dst, T src, Reduction red) {
  if constexpr (std::is_same_v<T, bool>) {
    dst = src;
  } else {
    using C = ComputeType<T>;
    const C a = static_cast<C>(dst), b = static_cast<C>(src);
    switch (red) {
      case Reduction::kNone:
        dst = src;
        break;
      case Reduction::kAdd:
        dst = ConvertElement<T>(static_cast<C>(a + b));
        break;
      case Reduction::kMul:
        dst = ConvertElement<T>(static_cast<C>(a * b));
        break;
      case Reduction::kMax:
        dst = ConvertElement<T>(std::max(a, b));
        break;
      case Reduction::kMin:
        dst = ConvertElement<T>(std::min(a, b));
        break;
    }
  }
}

// ---- ScatterElements / Scatter -------------------------------------------------

Status InferScatterElements(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(3, 3));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  SP_RETURN_IF_ERROR(ExpectIndexType(ctx, 1));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 2));
  SP_ASSIGN_OR_RETURN(Reduction red, ParseReduction(ctx.node()));
  SP_RETURN_IF_ERROR(CheckReductionType(ctx, red));
  const auto& data = ctx.input_dims(0);
  const auto& ind = ctx.input_dims(1);
  const auto& upd = ctx.input_dims(2);
  if (ind && upd) {
    if (ind->size() != upd->size())
      return ctx.Error("indices (rank ", ind->size(), ") and updates (rank ", upd->size(), ") must have the same rank");
    for (size_t d = 0; d < ind->size(); ++d)
      if ((*ind)[d].known() && (*upd)[d].known() && (*ind)[d].value != (*upd)[d].value)
        return ctx.Error("indices and updates shapes differ at dim ", d);
  }
  if (data) {
    if (data->empty()) return ctx.Error("data must have rank >= 1");
    SP_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().attr_int("axis", 0), data->size()));
    if (ind) {
      if (ind->size() != data->size())
        return ctx.Error("data (rank ", data->size(), ") and indices (rank ", ind->size(), ") must have the same rank");
      for (size_t d = 0; d < data->size(); ++d) {
        if (static_cast<int64_t>(d) == axis) continue;
        const ir::Dim &dd = (*data)[d], &id = (*ind)[d];
        if (dd.known() && id.known() && id.value > dd.value)
          return ctx.Error("indices dim ", d, " (", id.value, ") exceeds data dim (", dd.value, ")");
      }
    }
  }
  ctx.set_output(0, ctx.input_dtype(0), data);
  return Status::Ok();
}

Status RunScatterElements(KernelContext& ctx) {
  const Tensor& data = ctx.in(0);
  const Tensor& ind = ctx.in(1);
  const Tensor& upd = ctx.in(2);
  SP_ASSIGN_OR_RETURN(Reduction red, ParseReduction(ctx.node));
  const int64_t axis = WrapAxis(ctx.node.attr_int("axis", 0), data.rank());
  if (ind.shape() != upd.shape())
    return ctx.Error("indices ", ind.Describe(), " and updates ", upd.Describe(), " must have the same shape");
  for (int64_t d = 0; d < data.rank(); ++d)
    if (d != axis && ind.dim(d) > data.dim(d))
      return ctx.Error("indices dim ", d, " (", ind.dim(d), ") exceeds data dim (", data.dim(d), ")");
  Tensor& y = ctx.out(0);
  if (data.nbytes()) std::memcpy(y.mutable_raw(), data.raw(), data.nbytes());
  const Shape dstrides = StridesOf(data.shape());
  Shape walk = dstrides;
  walk[static_cast<size_t>(axis)] = 0;
  const int64_t n = data.dim(axis);
  const int64_t astride = dstrides[static_cast<size_t>(axis)];
  int64_t bad = 0;
  bool has_bad = false;
  SP_RETURN_IF_ERROR(DispatchDType(data.dtype(), [&]<class T>() {
    const T* src = upd.data<T>();
    T* dst = y.mutable_data<T>();
    ForEachOffset(ind.shape(), walk, [&](int64_t i, int64_t off) {
      const int64_t v = IndexAt(ind, i);
      auto w = WrapIndex(v, n);
      if (!w) {
        if (!has_bad) bad = v;
        has_bad = true;
        return;
      }
      Combine(dst[off + *w * astride], src[i], red);
    });
  }));
  if (has_bad) return ctx.Error("index ", bad, " is out of range for axis ", axis, " of size ", n);
  return Status::Ok();
}

// ---- ScatterND -----------------------------------------------------------------------

Status InferScatterND(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(3, 3));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 0));
  SP_RETURN_IF_ERROR(ExpectIndexType(ctx, 1));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 2));
  SP_ASSIGN_OR_RETURN(Reduction red, ParseReduction(ctx.node()));
  SP_RETURN_IF_ERROR(CheckReductionType(ctx, red));
  const auto& data = ctx.input_dims(0);
  const auto& ind = ctx.input_dims(1);
  const auto& upd = ctx.input_dims(2);
  if (data && data->empty()) return ctx.Error("data must have rank >= 1");
  if (ind && ind->empty()) return ctx.Error("indices must have rank >= 1");
  if (data && ind && upd && ind->back().known()) {
    const int64_t k = ind->back().value;
    const int64_t r = static_cast<int64_t>(data->size()), q = static_cast<int64_t>(ind->size());
    if (k < 1 || k > r) return ctx.Error("indices last dim ", k, " must be in [1, ", r, "]");
    const int64_t want_rank = q - 1 + r - k;
    if (static_cast<int64_t>(upd->size()) != want_rank)
      return ctx.Error("updates rank ", upd->size(), " must be ", want_rank);
    for (int64_t d = 0; d < want_rank; ++d) {
      const ir::Dim& u = (*upd)[d];
      const ir::Dim& e = d < q - 1 ? (*ind)[d] : (*data)[k + d - (q - 1)];
      if (u.known() && e.known() && u.value != e.value)
        return ctx.Error("updates dim ", d, " is ", u.value, ", expected ", e.value);
    }
  }
  ctx.set_output(0, ctx.input_dtype(0), data);
  return Status::Ok();
}

Status RunScatterND(KernelContext& ctx) {
  const Tensor& data = ctx.in(0);
  const Tensor& ind = ctx.in(1);
  const Tensor& upd = ctx.in(2);
  SP_ASSIGN_OR_RETURN(Reduction red, ParseReduction(ctx.node));
  const size_t r = data.shape().size(), q = ind.shape().size();
  const int64_t k = ind.shape().back();
  if (k < 1 || k > static_cast<int64_t>(r)) return ctx.Error("indices last dim ", k, " must be in [1, ", r, "]");
  Shape want(ind.shape().begin(), ind.shape().end() - 1);
  want.insert(want.end(), data.shape().begin() + k, data.shape().end());
  if (upd.shape() != want) return ctx.Error("updates ", upd.Describe(), " must have shape ", ShapeToString(want));
  Tensor& y = ctx.out(0);
  if (data.nbytes()) std::memcpy(y.mutable_raw(), data.raw(), data.nbytes());
  const int64_t count = SpanProduct(ind.shape(), 0, q - 1);
  const int64_t slice = SpanProduct(data.shape(), static_cast<size_t>(k), r);
  Status st = Status::Ok();
  SP_RETURN_IF_ERROR(DispatchDType(data.dtype(), [&]<class T>() {
    const T* src = upd.data<T>();
    T* dst = y.mutable_data<T>();
    for (int64_t n = 0; n < count; ++n) {
      int64_t off = 0;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t v = IndexAt(ind, n * k + j);
        auto w = WrapIndex(v, data.dim(j));
        if (!w) {
          st = ctx.Error("index ", v, " is out of range for data dim ", j, " of size ", data.dim(j));
          return;
        }
        off = off * data.dim(j) + *w;
      }
      T* out = dst + off * slice;
      const T* in = src + n * slice;
      if (red == Reduction::kNone) {
        std::copy(in, in + slice, out);
      } else {
        for (int64_t e = 0; e < slice; ++e) Combine(out[e], in[e], red);
      }
    }
  }));
  return st;
}

SAMPAN_REGISTER_OP("ScatterElements", InferScatterElements, RunScatterElements);
SAMPAN_REGISTER_OP("Scatter", InferScatterElements, RunScatterElements);
SAMPAN_REGISTER_OP("ScatterND", InferScatterND, RunScatterND);

}  // namespace
}  // namespace sampan::ops
