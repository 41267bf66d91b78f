// OneHot: indices (any numeric type) -> a tensor with one more axis of size
// `depth`, holding values[1] at the index and values[0] elsewhere. Indices in
// [-depth, -1] count from the end; indices outside [-depth, depth) give a row of
// off values.
#include <cstring>

#include "ops/index_util.h"

namespace sampan::ops {
namespace {

Result<int64_t> ReadDepth(const ir::Node& node, const Tensor& t) {
  if (t.numel() != 1) return InvalidArgument(node.Label(), ": depth must hold exactly one value, got ", t.Describe());
  const double d = ElementAsDouble(t, 0);
  if (!(d >= 1.0) || d > 9.0e15) return InvalidArgument(node.Label(), ": depth must be >= 1, got ", d);
  return static_cast<int64_t>(d);
}

Status InferOneHot(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(3, 3));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kNumericTypes));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 1, kNumericTypes));
  SP_RETURN_IF_ERROR(ExpectStorable(ctx, 2));
  const DType dtype = ctx.input_dtype(2);
  if (const auto& vd = ctx.input_dims(2); vd) {
    if (vd->size() != 1) return ctx.Error("values must be 1-D [off, on], got rank ", vd->size());
    if ((*vd)[0].known() && (*vd)[0].value != 2) return ctx.Error("values must have 2 elements, got ", (*vd)[0].value);
  }
  ir::Dim depth = ir::Dim::Unknown();
  if (const Tensor* dv = ctx.input_value(1)) {
    SP_ASSIGN_OR_RETURN(int64_t d, ReadDepth(ctx.node(), *dv));
    depth = ir::Dim::Known(d);
  }
  const auto& ind = ctx.input_dims(0);
  if (!ind) {
    ctx.set_output(0, dtype, std::nullopt);
    return Status::Ok();
  }
  const int64_t out_rank = static_cast<int64_t>(ind->size()) + 1;
  SP_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().attr_int("axis", -1), out_rank));
  ir::Dims out = *ind;
  out.insert(out.begin() + axis, depth);
  ctx.set_output(0, dtype, std::move(out));
  return Status::Ok();
}

Status RunOneHot(KernelContext& ctx) {
  const Tensor& ind = ctx.in(0);
  const Tensor& values = ctx.in(2);
  SP_ASSIGN_OR_RETURN(int64_t depth, ReadDepth(ctx.node, ctx.in(1)));
  if (values.numel() != 2) return ctx.Error("values must have 2 elements, got ", values.Describe());
  const int64_t axis = WrapAxis(ctx.node.attr_int("axis", -1), ind.rank() + 1);
  Tensor& y = ctx.out(0);
  const int64_t outer = SpanProduct(ind.shape(), 0, static_cast<size_t>(axis));
  const int64_t inner = SpanProduct(ind.shape(), static_cast<size_t>(axis), ind.shape().size());
  std::vector<int64_t> idx(static_cast<size_t>(ind.numel()));
  SP_RETURN_IF_ERROR(DispatchDType(ind.dtype(), [&]<class T>() {
    const T* p = ind.data<T>();
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = ConvertElement<int64_t>(p[i]);
  }));
  DispatchBySize(DTypeSize(values.dtype()), [&]<class U>() {
    const U off = static_cast<const U*>(values.raw())[0];
    const U on = static_cast<const U*>(values.raw())[1];
    U* dst = static_cast<U*>(y.mutable_raw());
    std::fill(dst, dst + y.numel(), off);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t j = 0; j < inner; ++j) {
        int64_t v = idx[static_cast<size_t>(o * inner + j)];
        if (v < -depth || v >= depth) continue;
        if (v < 0) v += depth;
        dst[(o * depth + v) * inner + j] = on;
      }
    }
  });
  return Status::Ok();
}

SAMPAN_REGISTER_OP("OneHot", InferOneHot, RunOneHot);

}  // namespace
}  // namespace sampan::ops
