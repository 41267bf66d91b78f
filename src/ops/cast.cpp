// Cast and CastLike between every pair of storable types, float8/float4/float6 and the
// 2/4-bit integers included, with `saturate` (Cast-19: float8 targets) and `round_mode`
// (Cast-24: float8e8m0 targets), and to and from strings (decimal text: CastTensor). Complex
// numbers are not supported.
#include "base/small_types.h"
#include "ops/common.h"
#include "ops/shape_util.h"

namespace sampan::ops {
namespace {

Status CheckCastType(const InferContext& ctx, DType t, const char* dir) {
  if (!IsStorableDType(t)) return ctx.NotSupported("cast ", dir, " ", DTypeName(t));
  if (const int64_t since = FirstOpsetWithType(t); ctx.opset() < since)
    return ctx.Error(ctx.node().op_type, "-", ctx.opset(), " has no ", DTypeName(t), " (added in opset ", since, ")");
  return Status::Ok();
}

Result<E8M0Rounding> RoundMode(const ir::Node& node) {
  const std::string mode = node.attr_string("round_mode", "up");
  if (mode == "up") return E8M0Rounding::kUp;
  if (mode == "down") return E8M0Rounding::kDown;
  if (mode == "nearest") return E8M0Rounding::kNearest;
  return InvalidArgument(node.Label(), ": round_mode '", mode, "' is not one of up, down, nearest");
}

Status CheckAttributes(const InferContext& ctx) {
  const int64_t saturate = ctx.node().attr_int("saturate", 1);
  if (saturate != 0 && saturate != 1) return ctx.Error("saturate must be 0 or 1, got ", saturate);
  return RoundMode(ctx.node()).status();
}

Status InferCast(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_ASSIGN_OR_RETURN(int64_t to, ctx.node().required_int("to"));
  if (to > INT32_MAX || to < 0 || !IsKnownDType(static_cast<int32_t>(to)))
    return ctx.Error("attribute 'to' = ", to, " is not a valid element type");
  const DType dt = static_cast<DType>(to);
  SP_RETURN_IF_ERROR(CheckCastType(ctx, ctx.input_dtype(0), "from"));
  SP_RETURN_IF_ERROR(CheckCastType(ctx, dt, "to"));
  SP_RETURN_IF_ERROR(CheckAttributes(ctx));
  ctx.set_output(0, dt, ctx.input_dims(0));
  return Status::Ok();
}

Status InferCastLike(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  const DType dt = ctx.input_dtype(1);
  SP_RETURN_IF_ERROR(CheckCastType(ctx, ctx.input_dtype(0), "from"));
  SP_RETURN_IF_ERROR(CheckCastType(ctx, dt, "to"));
  SP_RETURN_IF_ERROR(CheckAttributes(ctx));
  ctx.set_output(0, dt, ctx.input_dims(0));
  return Status::Ok();
}

Status RunCast(KernelContext& ctx) {
  CastOptions options;
  options.saturate = ctx.node.attr_int("saturate", 1) != 0;
  SP_ASSIGN_OR_RETURN(options.round_mode, RoundMode(ctx.node));
  SP_ASSIGN_OR_RETURN(ctx.out(0), CastTensor(ctx.in(0), ctx.infer->output(0).dtype, options));
  return Status::Ok();
}

SAMPAN_REGISTER_OP_DEF({.domain = "", .op_type = "Cast", .infer = InferCast, .run = RunCast, .strings = true});
SAMPAN_REGISTER_OP_DEF({.domain = "", .op_type = "CastLike", .infer = InferCastLike, .run = RunCast, .strings = true});

}  // namespace
}  // namespace sampan::ops
