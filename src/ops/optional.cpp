// OptionalHasElement and OptionalGetElement (opsets 15 and 18) on what Sampan can hold: a
// tensor or nothing. Optional- and sequence-typed values are refused where they enter (the
// importer), so an input that is present here is a tensor, which opset 18 allows: "has
// element" is true for it and false for an omitted input, and "get element" returns the
// tensor itself. Opsets 15-17 take optional-typed inputs only.
#include "ops/common.h"
#include "ops/shape_util.h"

namespace sampan::ops {
namespace {

Status NeedsOpset18ForTensors(const InferContext& ctx) {
  if (ctx.opset() < 18)
    return ctx.NotSupported("a tensor input at opset ", ctx.opset(),
                            " (opsets 15-17 take optional-typed values, which Sampan does not hold)");
  return Status::Ok();
}

Status InferOptionalHasElement(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(0, 1));
  const bool present = ctx.has_input(0);
  if (present) SP_RETURN_IF_ERROR(NeedsOpset18ForTensors(ctx));
  Tensor out = Tensor::Alloc(DType::kBool, {});
  out.mutable_data<bool>()[0] = present;
  ctx.set_output_shape(0, DType::kBool, {});
  ctx.set_output_value(0, std::move(out));
  return Status::Ok();
}

Status RunOptionalHasElement(KernelContext& ctx) {
  ctx.out(0) = Tensor::Alloc(DType::kBool, {});
  ctx.out(0).mutable_data<bool>()[0] = ctx.has_input(0);
  return Status::Ok();
}

Status InferOptionalGetElement(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  if (!ctx.has_input(0)) return ctx.Error("the input is omitted: an empty optional has no element");
  SP_RETURN_IF_ERROR(NeedsOpset18ForTensors(ctx));
  SP_RETURN_IF_ERROR(ExpectStorableInput(ctx, 0));
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_dims(0));
  return Status::Ok();
}

Status RunOptionalGetElement(KernelContext& ctx) {
  ctx.out(0) = ctx.in(0);  // shares storage; tensors are immutable once produced
  return Status::Ok();
}

SAMPAN_REGISTER_OP("OptionalHasElement", InferOptionalHasElement, RunOptionalHasElement);
SAMPAN_REGISTER_OP("OptionalGetElement", InferOptionalGetElement, RunOptionalGetElement);

}  // namespace
}  // namespace sampan::ops
