// Cast and CastLike. Types Sampan cannot store (string, float8, 4-bit, ...) are
// reported as unsupported; `saturate` only affects float8 targets, so it is
// accepted and otherwise ignored.
#include "ops/common.h"
#include "ops/shape_util.h"

namespace sampan::ops {
namespace {

Status CheckCastTypes(const InferContext& ctx, DType from, DType to) {
  if (from == DType::kString || to == DType::kString) return ctx.NotSupported("casts from or to string");
  if (!IsStorableDType(from)) return ctx.NotSupported("cast from ", DTypeName(from));
  if (!IsStorableDType(to)) return ctx.NotSupported("cast to ", DTypeName(to));
  return Status::Ok();
}

Status InferCast(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_ASSIGN_OR_RETURN(int64_t to, ctx.node().required_int("to"));
  if (to > INT32_MAX || to < 0 || !IsKnownDType(static_cast<int32_t>(to)) || to == 0)
    return ctx.Error("attribute 'to' = ", to, " is not a valid element type");
  const DType dt = static_cast<DType>(to);
  SP_RETURN_IF_ERROR(CheckCastTypes(ctx, ctx.input_dtype(0), dt));
  ctx.set_output(0, dt, ctx.input_dims(0));
  return Status::Ok();
}

Status InferCastLike(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  const DType dt = ctx.input_dtype(1);
  SP_RETURN_IF_ERROR(CheckCastTypes(ctx, ctx.input_dtype(0), dt));
  ctx.set_output(0, dt, ctx.input_dims(0));
  return Status::Ok();
}

Status RunCast(KernelContext& ctx) {
  SP_ASSIGN_OR_RETURN(ctx.out(0), CastTensor(ctx.in(0), ctx.infer->output(0).dtype));
  return Status::Ok();
}

SAMPAN_REGISTER_OP("Cast", InferCast, RunCast);
SAMPAN_REGISTER_OP("CastLike", InferCastLike, RunCast);

}  // namespace
}  // namespace sampan::ops
