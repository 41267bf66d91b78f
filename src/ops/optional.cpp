// OptionalHasElement and OptionalGetElement (opsets 15 and 18). The input is an optional
// (dtype kOptional: nothing or one tensor or sequence, base/tensor.h), or from opset 18 a
// tensor or sequence itself, or omitted. "Has element" is whether there is a value; "get
// element" returns it and fails on an empty optional.
#include "ops/common.h"
#include "ops/shape_util.h"

namespace sampan::ops {
namespace {

Status CheckInputKind(const InferContext& ctx) {
  if (!ctx.has_input(0) || ctx.input_dtype(0) == DType::kOptional) return Status::Ok();
  if (ctx.opset() < 18)
    return ctx.Error("input is a ", ctx.input_dtype(0) == DType::kSequence ? "sequence" : "tensor", " at opset ",
                     ctx.opset(), "; opsets 15-17 take an optional (opset 18 takes tensors and sequences too)");
  return Status::Ok();
}

Status InferOptionalHasElement(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(0, 1));
  SP_RETURN_IF_ERROR(CheckInputKind(ctx));
  ctx.set_output_shape(0, DType::kBool, {});
  // Known without running when the input is omitted, not an optional, or a known optional.
  const Tensor* v = ctx.input_value(0);
  if (!ctx.has_input(0) || ctx.input_dtype(0) != DType::kOptional || v != nullptr) {
    Tensor out = Tensor::Alloc(DType::kBool, {});
    out.mutable_data<bool>()[0] = ctx.has_input(0) && (ctx.input_dtype(0) != DType::kOptional || !v->items().empty());
    ctx.set_output_value(0, std::move(out));
  }
  return Status::Ok();
}

Status RunOptionalHasElement(KernelContext& ctx) {
  ctx.out(0) = Tensor::Alloc(DType::kBool, {});
  ctx.out(0).mutable_data<bool>()[0] = ctx.has_input(0) && (!ctx.in(0).is_optional() || !ctx.in(0).items().empty());
  return Status::Ok();
}

Status InferOptionalGetElement(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  if (!ctx.has_input(0)) return ctx.Error("the input is omitted: an empty optional has no element");
  SP_RETURN_IF_ERROR(CheckInputKind(ctx));
  if (ctx.input_dtype(0) != DType::kOptional) {
    ctx.set_output(0, ctx.input_dtype(0), ctx.input_dims(0));
    return Status::Ok();
  }
  if (const Tensor* v = ctx.input_value(0)) {
    if (v->items().empty()) return ctx.Error("the optional is empty: it has no element");
    ctx.set_output_shape(0, v->items()[0].dtype(), v->items()[0].shape());
    return Status::Ok();
  }
  ctx.set_output(0, DType::kUndefined, std::nullopt);  // known when the optional is
  return Status::Ok();
}

Status RunOptionalGetElement(KernelContext& ctx) {
  const Tensor& in = ctx.in(0);
  if (!in.is_optional()) {
    ctx.out(0) = in;  // shares storage; tensors are immutable once produced
    return Status::Ok();
  }
  if (in.items().empty()) return ctx.Error("the optional is empty: it has no element");
  ctx.out(0) = in.items()[0];
  return Status::Ok();
}

}  // namespace

SAMPAN_REGISTER_OP_DEF({.domain = "",
                        .op_type = "OptionalHasElement",
                        .infer = InferOptionalHasElement,
                        .run = RunOptionalHasElement,
                        .strings = true,
                        .sequences = true});
SAMPAN_REGISTER_OP_DEF({.domain = "",
                        .op_type = "OptionalGetElement",
                        .infer = InferOptionalGetElement,
                        .run = RunOptionalGetElement,
                        .strings = true,
                        .sequences = true});

}  // namespace sampan::ops
