// sampan::AddLayerNorm(A, B?, Scale, Bias?, YScale?) -> (Y, YQ?) {axis, epsilon, stash_type,
//                                                                 output_dtype, saturate}
//   Y  = LayerNormalization(Add(A, B), Scale, Bias)   (B absent: LayerNormalization(A, ...))
//   YQ = QuantizeLinear(Y, YScale) {output_dtype, saturate}   (sampan::QuantizeLinear's meaning)
// The residual block of post-LN transformers (BERT: LN(x + sublayer(x))) as one op; the
// CUDA backend forms it while lowering (backends/cuda/fuse_add_layer_norm.cpp) and runs
// it as one kernel. The sum is rounded to the input type first, exactly as the two ops
// do. No Mean / InvStdDev. YQ is the quantized copy an FP8/INT8 product reads (the norm
// writes it beside Y, which the next residual reads), taken from Y as rounded to its type,
// so it equals Q(Y) bit for bit. Inference and kernels are Add's, LayerNormalization's
// and QuantizeLinear's own.
#include "ops/common.h"

namespace sampan::ops {
namespace {

constexpr size_t kYScale = 4;

const OpDef* QuantizeOp() {
  return FindOp("sampan", "QuantizeLinear");
}

Status InferAddLayerNorm(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 5));  // B may be absent
  if (!ctx.has_input(2)) return ctx.Error("required input 2 (Scale) is missing");
  if (ctx.num_outputs() < 1 || ctx.num_outputs() > 2) return ctx.Error("expects 1 or 2 outputs");
  const bool quantized = ctx.num_outputs() == 2 && ctx.node().output(1) != nullptr;
  if (quantized != ctx.has_input(kYScale))
    return ctx.Error("a quantized output (output 1) and its scale (input 4) come together");
  const OpDef* add = FindOp("", "Add");
  const OpDef* ln = FindOp("", "LayerNormalization");
  if (add == nullptr || ln == nullptr || QuantizeOp() == nullptr)
    return ctx.NotSupported("Add, LayerNormalization or QuantizeLinear is not available");
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  InferInput x = ctx.input(0);
  if (ctx.has_input(1)) {
    InferContext sum(ctx.node(), ctx.opset(), {ctx.input(0), ctx.input(1)});
    SP_RETURN_IF_ERROR(add->infer(sum));
    x = InferInput{true, sum.output(0).dtype, sum.output(0).dims, nullptr};
  }
  std::vector<InferInput> norm_in = {x, ctx.input(2)};
  if (ctx.has_input(3)) norm_in.push_back(ctx.input(3));
  InferContext norm(ctx.node(), ctx.opset(), norm_in);
  SP_RETURN_IF_ERROR(ln->infer(norm));
  ctx.set_output(0, norm.output(0).dtype, norm.output(0).dims);
  if (quantized) {
    // Per tensor only: the node's `axis` is the norm's, not a scale axis.
    const InferInput& ys = ctx.input(kYScale);
    bool one = ys.dims.has_value();
    for (size_t d = 0; one && d < ys.dims->size(); ++d) one = (*ys.dims)[d].known() && (*ys.dims)[d].value == 1;
    if (!one || ctx.node().attr_int("block_size", 0) != 0)
      return ctx.Error("the output scale (input 4) must be one value (a per-tensor quantized copy)");
    InferContext q(ctx.node(), ctx.opset(),
                   {InferInput{true, norm.output(0).dtype, norm.output(0).dims, nullptr}, ctx.input(kYScale)});
    SP_RETURN_IF_ERROR(QuantizeOp()->infer(q));
    ctx.set_output(1, q.output(0).dtype, q.output(0).dims);
  }
  return Status::Ok();
}

Status RunAddLayerNorm(KernelContext& ctx) {
  const OpDef* add = FindOp("", "Add");
  const OpDef* ln = FindOp("", "LayerNormalization");
  std::vector<const Tensor*> norm_in = {ctx.inputs[0], ctx.inputs[2]};
  Tensor sum;
  if (ctx.has_input(1)) {
    sum = Tensor::Alloc(ctx.in(0).dtype(), BroadcastShapes({ctx.in(0).shape(), ctx.in(1).shape()}));
    KernelContext add_ctx{ctx.node, ctx.opset, {ctx.inputs[0], ctx.inputs[1]}, {sum}, nullptr};
    SP_RETURN_IF_ERROR(add->run(add_ctx));
    sum = add_ctx.outputs[0];
    norm_in[0] = &sum;
  }
  if (ctx.has_input(3)) norm_in.push_back(ctx.inputs[3]);
  KernelContext norm_ctx{ctx.node, ctx.opset, norm_in, {ctx.out(0)}, nullptr};
  SP_RETURN_IF_ERROR(ln->run(norm_ctx));
  ctx.out(0) = norm_ctx.outputs[0];
  if (ctx.outputs.size() > 1 && ctx.has_input(kYScale)) {
    KernelContext q_ctx{ctx.node, ctx.opset, {&ctx.out(0), ctx.inputs[kYScale]}, {ctx.out(1)}, nullptr};
    SP_RETURN_IF_ERROR(QuantizeOp()->run(q_ctx));
    ctx.out(1) = q_ctx.outputs[0];
  }
  return Status::Ok();
}

SAMPAN_REGISTER_DOMAIN_OP("sampan", "AddLayerNorm", InferAddLayerNorm, RunAddLayerNorm);

}  // namespace
}  // namespace sampan::ops
