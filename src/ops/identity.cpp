// Identity, Dropout (inference only) and Expand.
#include "ops/common.h"
#include "ops/shape_util.h"

namespace sampan::ops {
namespace {

// ---------------------------------------------------------------- Identity

Status InferIdentity(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectStorableInput(ctx, 0));
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_dims(0));
  return Status::Ok();
}

Status RunIdentity(KernelContext& ctx) {
  ctx.out(0) = ctx.in(0);  // shares storage; tensors are immutable once produced
  return Status::Ok();
}

// ---------------------------------------------------------------- Dropout

// Inference: y = x and the optional mask is all true. Opsets before 7 had an
// is_test attribute; Sampan is an inference engine and treats them as is_test=1.
Status InferDropout(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, ctx.opset() >= 12 ? 3 : 1));
  SP_RETURN_IF_ERROR(ExpectStorableInput(ctx, 0));
  const DType dt = ctx.input_dtype(0);
  if (!IsFloatDType(dt)) return ctx.NotSupported("input of type ", DTypeName(dt));
  double ratio = ctx.node().attr_float("ratio", 0.5f);
  bool ratio_known = true;
  if (ctx.opset() >= 12) {
    ratio_known = !ctx.has_input(1) || ctx.input_value(1) != nullptr;
    if (const Tensor* r = ctx.input_value(1)) {
      if (r->numel() != 1 || !IsFloatDType(r->dtype())) return ctx.Error("ratio must be a float scalar");
      ratio = ElementAsDouble(*r, 0);
    } else if (!ctx.has_input(1)) {
      ratio = 0.5;
    }
    if (ratio_known && !(ratio >= 0 && ratio < 1)) return ctx.Error("ratio must be in [0, 1), got ", ratio);
    if (const Tensor* t = ctx.input_value(2)) {
      if (t->numel() != 1 || t->dtype() != DType::kBool) return ctx.Error("training_mode must be a bool scalar");
      const bool training = t->data<bool>()[0];
      // In training mode a ratio of 0 still drops nothing; anything else is random.
      if (training && !(ratio_known && ratio == 0)) return ctx.NotSupported("training_mode=true (random dropout)");
    }
  }
  ctx.set_output(0, dt, ctx.input_dims(0));
  if (ctx.num_outputs() > 1) ctx.set_output(1, ctx.opset() >= 10 ? DType::kBool : dt, ctx.input_dims(0));
  return Status::Ok();
}

Status RunDropout(KernelContext& ctx) {
  ctx.out(0) = ctx.in(0);
  if (ctx.outputs.size() > 1) {
    Tensor& mask = ctx.out(1);
    Status st = DispatchDType(mask.dtype(), [&]<class T>() {
      T* m = mask.mutable_data<T>();
      const T one = ConvertElement<T>(1);
      for (int64_t i = 0; i < mask.numel(); ++i) m[i] = one;
    });
    SP_RETURN_IF_ERROR(st);
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- Expand

Status InferExpand(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectStorableInput(ctx, 0));
  const DType dt = ctx.input_dtype(0);
  if (ctx.input_dtype(1) != DType::kInt64)
    return ctx.Error("shape input must be int64, got ", DTypeName(ctx.input_dtype(1)));
  if (ctx.input_rank(1) > 1) return ctx.Error("shape input must be 1-D");
  const auto& in = ctx.input_dims(0);
  const Tensor* v = ctx.input_value(1);
  if (v == nullptr) {
    const int64_t n = StaticLength1D(ctx, 1);
    if (!in || n < 0) {
      ctx.set_output(0, dt, std::nullopt);
      return Status::Ok();
    }
    const int64_t r = static_cast<int64_t>(in->size());
    const int64_t out_rank = std::max(r, n);
    ir::Dims out = UnknownDims(out_rank);
    for (int64_t i = 0; i < r; ++i) {
      const ir::Dim& d = (*in)[static_cast<size_t>(i)];
      // A dim other than 1 survives broadcasting (the target must be 1 or equal there).
      if (d.known() && d.value != 1)
        out[static_cast<size_t>(out_rank - r + i)] = d;
      else if (!d.known() && i < r - n)
        out[static_cast<size_t>(out_rank - r + i)] = d;
    }
    ctx.set_output(0, dt, std::move(out));
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ReadInts(ctx, *v, "shape"));
  for (int64_t d : shape)
    if (d < 0) return ctx.Error("shape has a negative dimension ", d);
  if (!in) {
    ctx.set_output(0, dt, std::nullopt);
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(ir::Dims out, BroadcastDims(ctx, *in, DimsOf(shape)));
  ctx.set_output(0, dt, std::move(out));
  return Status::Ok();
}

Status RunExpand(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const int64_t off = y.rank() - x.rank();
  const Shape xs = StridesOf(x.shape());
  Shape strides(static_cast<size_t>(y.rank()), 0);
  for (int64_t d = 0; d < x.rank(); ++d)
    strides[static_cast<size_t>(d + off)] = x.dim(d) == 1 ? 0 : xs[static_cast<size_t>(d)];
  StridedCopy(x.raw(), y.mutable_raw(), DTypeSize(x.dtype()), y.shape(), strides, 0);
  return Status::Ok();
}

SAMPAN_REGISTER_OP_DEF({.domain = "",
                        .op_type = "Identity",
                        .infer = InferIdentity,
                        .run = RunIdentity,
                        .strings = true,
                        .sequences = true});
SAMPAN_REGISTER_OP_DEF({.domain = "",
                        .op_type = "Dropout",
                        .infer = InferDropout,
                        .run = RunDropout,
                        .determinism = Determinism::kRandomInTraining});
SAMPAN_REGISTER_OP("Expand", InferExpand, RunExpand);

}  // namespace
}  // namespace sampan::ops
