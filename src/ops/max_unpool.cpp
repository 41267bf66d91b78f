// MaxUnpool (opsets 9, 11, 22): the partial inverse of MaxPool. X [N, C, in...] and I (same
// shape, int64) are MaxPool's outputs; I holds flat row-major indices into the tensor
// [N, C, unpooled...] with unpooled[d] = (in[d] - 1) * strides[d] - pads_begin[d] - pads_end[d]
// + kernel[d]. Each X value lands at its index, the rest is zero. An output_shape input
// (>= that shape in every dim) enlarges the output: the unpooled block sits at its origin and
// the indices still address the unpooled shape, as the ONNX reference implementation does.
#include <cstring>

#include "ops/common.h"
#include "ops/conv_util.h"
#include "ops/index_util.h"

namespace sampan::ops {
namespace {

Result<SpatialAttrs> ReadAttrs(const InferContext& ctx, int64_t rank) {
  SpatialAttrs a;
  if (!ctx.node().has_attr("kernel_shape")) return ctx.Error("missing required attribute 'kernel_shape'");
  a.kernel = ctx.node().attr_ints("kernel_shape");
  if (static_cast<int64_t>(a.kernel.size()) != rank - 2)
    return ctx.Error("kernel_shape has ", a.kernel.size(), " values but X has ", rank - 2, " spatial dims");
  SP_RETURN_IF_ERROR(ReadSpatialAttrs(ctx.node(), &a, /*allow_ceil=*/false, /*allow_dilations=*/false));
  return a;
}

// Unpooled size of spatial dim i for an input of size `in`; error when it is negative.
Result<int64_t> UnpooledDim(const InferContext& ctx, const SpatialAttrs& a, size_t i, int64_t in) {
  const int64_t v = (in - 1) * a.strides[i] - a.pads[i] - a.pads[a.rank() + i] + a.kernel[i];
  if (v < 0) return ctx.Error("spatial dim ", i, " of size ", in, " unpools to a negative size ", v);
  return v;
}

// output_shape must list one value per dim of X, each at least the unpooled size.
Status CheckOutputShape(const InferContext& ctx, const std::vector<int64_t>& shape, const ir::Dims& unpooled) {
  if (shape.size() != unpooled.size())
    return ctx.Error("output_shape has ", shape.size(), " values but X has rank ", unpooled.size());
  for (size_t d = 0; d < shape.size(); ++d)
    if (unpooled[d].known() && shape[d] < unpooled[d].value)
      return ctx.Error("output_shape[", d, "] = ", shape[d], " is smaller than the unpooled size ", unpooled[d].value);
  return Status::Ok();
}

Status InferMaxUnpool(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 3));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  if (ctx.input_dtype(1) != DType::kInt64) return ctx.Error("I must be int64, got ", DTypeName(ctx.input_dtype(1)));
  if (ctx.has_input(2) && ctx.input_dtype(2) != DType::kInt64)
    return ctx.Error("output_shape must be int64, got ", DTypeName(ctx.input_dtype(2)));
  const auto& xd = ctx.input_dims(0);
  const auto& id = ctx.input_dims(1);
  if (xd && id) {
    if (xd->size() != id->size()) return ctx.Error("I has rank ", id->size(), " but X has rank ", xd->size());
    for (size_t d = 0; d < xd->size(); ++d)
      if ((*xd)[d].known() && (*id)[d].known() && (*xd)[d].value != (*id)[d].value)
        return ctx.Error("I dim ", d, " is ", (*id)[d].value, " but X dim ", d, " is ", (*xd)[d].value);
  }
  const auto& dims = xd ? xd : id;
  if (!dims) {
    ctx.set_output(0, ctx.input_dtype(0), std::nullopt);
    return Status::Ok();
  }
  const int64_t rank = static_cast<int64_t>(dims->size());
  if (rank < 3) return ctx.Error("X must have rank >= 3 (N, C, spatial...), got rank ", rank);
  SP_ASSIGN_OR_RETURN(SpatialAttrs a, ReadAttrs(ctx, rank));
  ir::Dims unpooled{(*dims)[0], (*dims)[1]};
  for (size_t i = 0; i < a.rank(); ++i) {
    const ir::Dim& d = (*dims)[2 + i];
    if (!d.known()) {
      unpooled.push_back(ir::Dim::Unknown());
      continue;
    }
    SP_ASSIGN_OR_RETURN(int64_t v, UnpooledDim(ctx, a, i, d.value));
    unpooled.push_back(ir::Dim::Known(v));
  }
  if (!ctx.has_input(2)) {
    ctx.set_output(0, ctx.input_dtype(0), unpooled);
    return Status::Ok();
  }
  if (const auto& sd = ctx.input_dims(2); sd && (sd->size() != 1 || ((*sd)[0].known() && (*sd)[0].value != rank)))
    return ctx.Error("output_shape must be 1-D with ", rank, " values");
  const Tensor* shape = ctx.input_value(2);
  if (!shape) {
    ctx.set_output(0, ctx.input_dtype(0), ir::Dims(static_cast<size_t>(rank), ir::Dim::Unknown()));
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(std::vector<int64_t> out, ToInt64Vector(*shape, "output_shape"));
  SP_RETURN_IF_ERROR(CheckOutputShape(ctx, out, unpooled));
  ctx.set_output(0, ctx.input_dtype(0), DimsOf(out));
  return Status::Ok();
}

Status RunMaxUnpool(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor& ind = ctx.in(1);
  if (ind.shape() != x.shape()) return ctx.Error("I ", ind.Describe(), " does not match X ", x.Describe());
  SP_ASSIGN_OR_RETURN(SpatialAttrs a, ReadAttrs(*ctx.infer, x.rank()));
  Shape unpooled{x.dim(0), x.dim(1)};
  for (size_t i = 0; i < a.rank(); ++i) {
    SP_ASSIGN_OR_RETURN(int64_t v, UnpooledDim(*ctx.infer, a, i, x.dim(static_cast<int64_t>(2 + i))));
    unpooled.push_back(v);
  }
  Shape out_shape = unpooled;
  if (ctx.has_input(2)) {
    SP_ASSIGN_OR_RETURN(out_shape, ToInt64Vector(ctx.in(2), "output_shape"));
    SP_RETURN_IF_ERROR(CheckOutputShape(*ctx.infer, out_shape, DimsOf(unpooled)));
  }
  Tensor& y = ctx.out(0);
  if (!y.defined()) y = Tensor::Alloc(x.dtype(), out_shape);
  const int64_t total = NumElements(unpooled);
  const size_t r = unpooled.size();
  const int64_t* pi = ind.data<int64_t>();
  for (int64_t k = 0; k < x.numel(); ++k)
    if (pi[k] < 0 || pi[k] >= total)
      return ctx.Error("I[", k, "] = ", pi[k], " is outside the unpooled tensor ", ShapeToString(unpooled), " (", total,
                       " elements)");
  const Shape out_strides = StridesOf(out_shape);
  DispatchBySize(DTypeSize(x.dtype()), [&]<class U>() {
    const U* px = x.data<U>();
    U* py = y.mutable_data<U>();
    for (int64_t k = 0; k < x.numel(); ++k) {
      int64_t rem = pi[k], off = 0;  // the unpooled multi-index, re-laid in the output's strides
      for (size_t d = r; d-- > 0;) {
        off += (rem % unpooled[d]) * out_strides[d];
        rem /= unpooled[d];
      }
      py[off] = px[k];
    }
  });
  return Status::Ok();
}

SAMPAN_REGISTER_OP("MaxUnpool", InferMaxUnpool, RunMaxUnpool);

}  // namespace
}  // namespace sampan::ops
