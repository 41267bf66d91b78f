// Transpose: permutes the axes (default perm reverses them).
#include "ops/common.h"
#include "ops/shape_util.h"

namespace sampan::ops {
namespace {

Result<std::vector<int64_t>> ReadPerm(const InferContext& ctx, int64_t rank) {
  std::vector<int64_t> perm;
  if (!ctx.node().has_attr("perm")) {
    for (int64_t i = rank; i-- > 0;) perm.push_back(i);
    return perm;
  }
  perm = ctx.node().attr_ints("perm");
  if (static_cast<int64_t>(perm.size()) != rank)
    return ctx.Error("perm has ", perm.size(), " entries but the input has rank ", rank);
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t& p : perm) {
    SP_ASSIGN_OR_RETURN(p, NormalizeAxis(ctx, p, rank));
    if (seen[static_cast<size_t>(p)]) return ctx.Error("perm is not a permutation (", p, " repeats)");
    seen[static_cast<size_t>(p)] = true;
  }
  return perm;
}

Status InferTranspose(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectStorableInput(ctx, 0));
  const DType dt = ctx.input_dtype(0);
  const auto& in = ctx.input_dims(0);
  if (!in) {
    if (ctx.node().has_attr("perm")) {
      ctx.set_output(0, dt, UnknownDims(static_cast<int64_t>(ctx.node().attr_ints("perm").size())));
    } else {
      ctx.set_output(0, dt, std::nullopt);
    }
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(std::vector<int64_t> perm, ReadPerm(ctx, static_cast<int64_t>(in->size())));
  ir::Dims out;
  for (int64_t p : perm) out.push_back((*in)[static_cast<size_t>(p)]);
  ctx.set_output(0, dt, std::move(out));
  return Status::Ok();
}

Status RunTranspose(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  std::vector<int64_t> perm;
  if (ctx.node.has_attr("perm")) {
    perm = ctx.node.attr_ints("perm");
    for (int64_t& p : perm) p = WrapAxis(p, x.rank());
  } else {
    for (int64_t i = x.rank(); i-- > 0;) perm.push_back(i);
  }
  const Shape in_strides = StridesOf(x.shape());
  Shape strides(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) strides[i] = in_strides[static_cast<size_t>(perm[i])];
  StridedCopy(x.raw(), y.mutable_raw(), DTypeSize(x.dtype()), y.shape(), strides, 0);
  return Status::Ok();
}

SAMPAN_REGISTER_OP("Transpose", InferTranspose, RunTranspose);

}  // namespace
}  // namespace sampan::ops
