// Quantized products the optimizer makes of Q/DQ patterns (passes/fuse_quantized.cpp), domain
// "sampan":
//   QConv(X, x_scale, x_zp, W, w_scale, w_zp?, B?, Z?, y_scale?, y_zp?)
//   QMatMul(X, x_scale, x_zp, W, w_scale, w_zp?, B?, Z?, y_scale?, y_zp?)
// mean exactly the Q/DQ graph they replace:
//   x = DequantizeLinear(X, x_scale, x_zp)                  per tensor
//   w = DequantizeLinear(W, w_scale, w_zp, axis=w_axis)     per tensor or per output channel
//   y = FusedConv(x, w, B, Z) / FusedMatMul(x, w, B, Z)     with Conv's attributes and the
//                                                           fused `activation`
//   out = QuantizeLinear(y, y_scale, y_zp)                  when y_scale is given, else y (float32)
// B and Z have the scales' float type (B: one value per output channel). X is int8 or uint8, W
// int8 or uint8 (a constant in every graph the pass makes); QMatMul also takes float8 X and W
// (e4m3fn/e5m2, per-tensor scales: the FP8 products of Hopper, cuBLASLt on the cuda backend). The reference kernel runs
// that graph with the reference kernels of those ops, so the fused node computes what the unfused graph computed;
// backends run it on integer kernels (cpu: oneDNN u8/s8 convolution and matmul).
#include <cstring>
#include <functional>
#include <memory>

#include "ops/common.h"
#include "ops/control_flow.h"
#include "ops/fused.h"
#include "ops/run_node.h"

namespace sampan::ops {
namespace {

enum Input : size_t { kX = 0, kXScale, kXZp, kW, kWScale, kWZp, kB, kZ, kYScale, kYZp, kNumInputs };

struct Unfolded {
  ir::Graph g;
  ir::Node* dqx = nullptr;
  ir::Node* dqw = nullptr;
  ir::Node* product = nullptr;
  ir::Node* q = nullptr;  // null: float output
};

bool IsQConv(const ir::Node& n) {
  return n.op_type == "QConv";
}

// The node as the four nodes it stands for (inputs named in0..in9 as present).
Result<std::unique_ptr<Unfolded>> Unfold(const ir::Node& node, const std::vector<bool>& present) {
  auto u = std::make_unique<Unfolded>();
  ir::Graph& g = u->g;
  std::vector<ir::Value*> in(kNumInputs, nullptr);
  for (size_t i = 0; i < kNumInputs; ++i)
    if (i < present.size() && present[i]) {
      SP_ASSIGN_OR_RETURN(in[i], g.AddValue(StrCat("in", i)));
    }
  for (size_t i : {kX, kXScale, kW, kWScale})
    if (in[i] == nullptr) return InvalidArgument(node.Label(), ": input ", i, " is required");
  if ((in[kYZp] != nullptr) && in[kYScale] == nullptr)
    return InvalidArgument(node.Label(), ": y_zero_point without y_scale");
  SP_ASSIGN_OR_RETURN(ir::Value * x, g.AddValue("x"));
  SP_ASSIGN_OR_RETURN(ir::Value * w, g.AddValue("w"));
  SP_ASSIGN_OR_RETURN(ir::Value * y, g.AddValue("y"));
  SP_ASSIGN_OR_RETURN(u->dqx, g.AddNode("DequantizeLinear", {in[kX], in[kXScale], in[kXZp]}, {x}, node.name + "/dqx"));
  SP_ASSIGN_OR_RETURN(u->dqw, g.AddNode("DequantizeLinear", {in[kW], in[kWScale], in[kWZp]}, {w}, node.name + "/dqw"));
  u->dqw->attrs["axis"] = ir::Attribute::Int(node.attr_int("w_axis", IsQConv(node) ? 0 : 1));
  SP_ASSIGN_OR_RETURN(u->product,
                      g.AddNode(IsQConv(node) ? "FusedConv" : "FusedMatMul", {x, w, in[kB], in[kZ]}, {y}, node.name));
  u->product->domain = kSampanDomain;
  for (const auto& [key, attr] : node.attrs)
    if (key != "w_axis") u->product->attrs[key] = attr;
  if (in[kYScale] != nullptr) {
    SP_ASSIGN_OR_RETURN(ir::Value * out, g.AddValue("out"));
    SP_ASSIGN_OR_RETURN(u->q, g.AddNode("QuantizeLinear", {y, in[kYScale], in[kYZp]}, {out}, node.name + "/q"));
  }
  return u;
}

std::vector<bool> Present(size_t n, const std::function<bool(size_t)>& has) {
  std::vector<bool> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = has(i);
  return p;
}

// Q/DQ semantics of the newest opset (per-axis scales, float16 scales, float8 types): the fused
// node is Sampan's, so the model's opset does not limit it. The product's op is the same at every
// opset the importer takes.
int64_t QdqOpset(int64_t opset) {
  return std::max<int64_t>(opset, 21);
}

bool IsFloat8(DType t) {
  return t == DType::kFloat8E4M3FN || t == DType::kFloat8E5M2;
}
bool IsFloatType(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}

Status CheckOperands(const InferContext& ctx) {
  const bool conv = IsQConv(ctx.node());
  const DType xt = ctx.input_dtype(kX), wt = ctx.input_dtype(kW);
  const bool ints = (xt == DType::kInt8 || xt == DType::kUInt8) && (wt == DType::kInt8 || wt == DType::kUInt8);
  const bool fp8 = !conv && IsFloat8(xt) && IsFloat8(wt);
  if (!ints && !fp8)
    return ctx.Error("X and W must be int8/uint8", conv ? "" : " or both float8 (e4m3fn, e5m2)", ", got ",
                     DTypeName(xt), " and ", DTypeName(wt));
  // The float type the product computes in: the scales' (DequantizeLinear's output type).
  const DType ft = ctx.input_dtype(kXScale);
  if (!IsFloatType(ft)) return ctx.Error("x_scale must be float32, float16 or bfloat16, got ", DTypeName(ft));
  for (size_t i : {kWScale, kB, kZ})
    if (ctx.has_input(i) && ctx.input_dtype(i) != ft)
      return ctx.Error("input ", i, " must have x_scale's type ", DTypeName(ft), ", got ",
                       DTypeName(ctx.input_dtype(i)));
  if (ctx.has_input(kYScale) && !IsFloatType(ctx.input_dtype(kYScale)))
    return ctx.Error("y_scale must be float32, float16 or bfloat16, got ", DTypeName(ctx.input_dtype(kYScale)));
  if (ctx.has_input(kYZp) && !ctx.has_input(kYScale)) return ctx.Error("y_zero_point without y_scale");
  if (ctx.has_input(kYScale) && !ctx.has_input(kYZp))
    return ctx.Error("y_scale without y_zero_point (it gives the output type)");
  const int64_t axis = ctx.node().attr_int("w_axis", conv ? 0 : 1);
  if (conv && axis != 0) return ctx.Error("w_axis must be 0 (output channels of W), got ", axis);
  if (!conv && axis != 1 && axis != -1) return ctx.Error("w_axis must be 1 (columns of W), got ", axis);
  return Status::Ok();
}

Status InferQuantized(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(5, kNumInputs));
  SP_RETURN_IF_ERROR(CheckOperands(ctx));
  const size_t n = ctx.num_inputs();
  SP_ASSIGN_OR_RETURN(auto u, Unfold(ctx.node(), Present(n, [&](size_t i) { return ctx.has_input(i); })));
  const int64_t qop = QdqOpset(ctx.opset());
  auto in = [&](size_t i) { return i < n ? ctx.input(i) : InferInput{}; };
  InferContext dqx(*u->dqx, qop, {in(kX), in(kXScale), in(kXZp)});
  SP_RETURN_IF_ERROR(FindOp("", "DequantizeLinear")->infer(dqx));
  InferContext dqw(*u->dqw, qop, {in(kW), in(kWScale), in(kWZp)});
  SP_RETURN_IF_ERROR(FindOp("", "DequantizeLinear")->infer(dqw));
  auto as_input = [](const InferContext& c) {
    return InferInput{true, c.output(0).dtype, c.output(0).dims, c.output_value(0) ? &*c.output_value(0) : nullptr};
  };
  // The product never sees values: its inputs change at run time.
  InferInput xin = as_input(dqx);
  xin.value = nullptr;
  InferContext product(*u->product, ctx.opset(), {xin, as_input(dqw), in(kB), in(kZ)});
  SP_RETURN_IF_ERROR(FindOp(kSampanDomain, u->product->op_type)->infer(product));
  if (u->q == nullptr) {
    ctx.set_output(0, product.output(0).dtype, product.output(0).dims);
    return Status::Ok();
  }
  InferInput yin{true, product.output(0).dtype, product.output(0).dims, nullptr};
  InferContext q(*u->q, qop, {yin, in(kYScale), in(kYZp)});
  SP_RETURN_IF_ERROR(FindOp("", "QuantizeLinear")->infer(q));
  ctx.set_output(0, q.output(0).dtype, q.output(0).dims);
  return Status::Ok();
}

Status RunQuantized(KernelContext& ctx) {
  const size_t n = ctx.inputs.size();
  SP_ASSIGN_OR_RETURN(auto u, Unfold(ctx.node, Present(n, [&](size_t i) { return ctx.has_input(i); })));
  const int64_t qop = QdqOpset(ctx.opset);
  auto in = [&](size_t i) -> const Tensor* { return i < n ? ctx.inputs[i] : nullptr; };
  std::vector<Tensor> x, w, y;
  SP_RETURN_IF_ERROR(RunNode(*u->dqx, qop, {in(kX), in(kXScale), in(kXZp)}, &x));
  SP_RETURN_IF_ERROR(RunNode(*u->dqw, qop, {in(kW), in(kWScale), in(kWZp)}, &w));
  SP_RETURN_IF_ERROR(RunNode(*u->product, ctx.opset, {&x[0], &w[0], in(kB), in(kZ)}, &y));
  std::vector<Tensor> q;
  if (u->q != nullptr) SP_RETURN_IF_ERROR(RunNode(*u->q, qop, {&y[0], in(kYScale), in(kYZp)}, &q));
  Tensor& result = u->q != nullptr ? q[0] : y[0];
  SetKernelOutput(ctx, 0, std::move(result));
  return Status::Ok();
}

}  // namespace

SAMPAN_REGISTER_DOMAIN_OP("sampan", "QConv", InferQuantized, RunQuantized);
SAMPAN_REGISTER_DOMAIN_OP("sampan", "QMatMul", InferQuantized, RunQuantized);

}  // namespace sampan::ops
