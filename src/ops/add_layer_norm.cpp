// sampan::AddLayerNorm(A, B, Scale, Bias?) {axis, epsilon, stash_type}
//   = LayerNormalization(Add(A, B), Scale, Bias)
// The residual block of post-LN transformers (BERT: LN(x + sublayer(x))) as one op; the
// CUDA backend forms it while lowering (backends/cuda/fuse_add_layer_norm.cpp) and runs
// it as one kernel. The sum is rounded to the input type first, exactly as the two ops
// do. One output (no Mean / InvStdDev). Inference and kernels are Add's and
// LayerNormalization's own.
#include "ops/common.h"

namespace sampan::ops {
namespace {

Status InferAddLayerNorm(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(3, 4));
  if (ctx.num_outputs() != 1) return ctx.Error("expects 1 output");
  const OpDef* add = FindOp("", "Add");
  const OpDef* ln = FindOp("", "LayerNormalization");
  if (add == nullptr || ln == nullptr) return ctx.NotSupported("Add or LayerNormalization is not available");
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  InferContext sum(ctx.node(), ctx.opset(), {ctx.input(0), ctx.input(1)});
  SP_RETURN_IF_ERROR(add->infer(sum));
  std::vector<InferInput> norm_in = {InferInput{true, sum.output(0).dtype, sum.output(0).dims, nullptr}, ctx.input(2)};
  if (ctx.num_inputs() > 3) norm_in.push_back(ctx.input(3));
  InferContext norm(ctx.node(), ctx.opset(), norm_in);
  SP_RETURN_IF_ERROR(ln->infer(norm));
  ctx.set_output(0, norm.output(0).dtype, norm.output(0).dims);
  return Status::Ok();
}

Status RunAddLayerNorm(KernelContext& ctx) {
  const OpDef* add = FindOp("", "Add");
  const OpDef* ln = FindOp("", "LayerNormalization");
  Tensor sum = Tensor::Alloc(ctx.in(0).dtype(), BroadcastShapes({ctx.in(0).shape(), ctx.in(1).shape()}));
  KernelContext add_ctx{ctx.node, ctx.opset, {ctx.inputs[0], ctx.inputs[1]}, {sum}, nullptr};
  SP_RETURN_IF_ERROR(add->run(add_ctx));
  std::vector<const Tensor*> norm_in = {&add_ctx.outputs[0], ctx.inputs[2]};
  if (ctx.inputs.size() > 3) norm_in.push_back(ctx.inputs[3]);
  KernelContext norm_ctx{ctx.node, ctx.opset, norm_in, {ctx.out(0)}, ctx.infer};
  SP_RETURN_IF_ERROR(ln->run(norm_ctx));
  ctx.out(0) = norm_ctx.outputs[0];
  return Status::Ok();
}

SAMPAN_REGISTER_DOMAIN_OP("sampan", "AddLayerNorm", InferAddLayerNorm, RunAddLayerNorm);

}  // namespace
}  // namespace sampan::ops
