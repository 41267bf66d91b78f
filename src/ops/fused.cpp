// Reference kernels of the fused ops (see fused.h): the base op's own inference
// and kernel, followed by the epilogue in float; and the one parser of their `activation`.
#include "ops/fused.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <memory>

#include "ops/common.h"
#include "ops/control_flow.h"
#include "ops/run_node.h"

namespace sampan::ops {

const char* ActivationName(Activation kind) {
  switch (kind) {
    case Activation::kNone:
      return "";
    case Activation::kRelu:
      return "Relu";
    case Activation::kLeakyRelu:
      return "LeakyRelu";
    case Activation::kClip:
      return "Clip";
    case Activation::kSigmoid:
      return "Sigmoid";
    case Activation::kSiLU:
      return "SiLU";
    case Activation::kTanh:
      return "Tanh";
    case Activation::kHardSigmoid:
      return "HardSigmoid";
    case Activation::kHardSwish:
      return "HardSwish";
    case Activation::kGelu:
      return "Gelu";
    case Activation::kGeluTanh:
      return "GeluTanh";
  }
  return "?";
}

size_t ActivationParamCount(Activation kind) {
  switch (kind) {
    case Activation::kLeakyRelu:
      return 1;
    case Activation::kClip:
    case Activation::kHardSigmoid:
      return 2;
    case Activation::kNone:
    case Activation::kRelu:
    case Activation::kSigmoid:
    case Activation::kSiLU:
    case Activation::kTanh:
    case Activation::kHardSwish:
    case Activation::kGelu:
    case Activation::kGeluTanh:
      return 0;
  }
  return 0;
}

std::vector<float> ActivationParams(const FusedActivation& a) {
  std::vector<float> p = {a.p0, a.p1};
  p.resize(ActivationParamCount(a.kind));
  return p;
}

namespace {
constexpr Activation kAll[] = {Activation::kNone, Activation::kRelu,        Activation::kLeakyRelu,
                               Activation::kClip, Activation::kSigmoid,     Activation::kSiLU,
                               Activation::kTanh, Activation::kHardSigmoid, Activation::kHardSwish,
                               Activation::kGelu, Activation::kGeluTanh};
static_assert(std::size(kAll) == static_cast<size_t>(Activation::kGeluTanh) + 1, "kAll lists every Activation");
}  // namespace

Result<FusedActivation> ParseActivation(const std::string& name, const std::vector<float>& params) {
  for (Activation kind : kAll) {
    if (name != ActivationName(kind)) continue;
    const size_t want = ActivationParamCount(kind);
    if (params.size() != want)
      return InvalidArgument("attribute activation_params: activation ", name.empty() ? "(none)" : name, " takes ",
                             want, want == 1 ? " value" : " values", ", got ", params.size());
    FusedActivation a{kind};
    if (want > 0) a.p0 = params[0];
    if (want > 1) a.p1 = params[1];
    return a;
  }
  std::string known;
  for (Activation kind : kAll)
    if (kind != Activation::kNone) known += StrCat(known.empty() ? "" : ", ", ActivationName(kind));
  return InvalidArgument("attribute activation: unknown fused activation '", name, "' (known: ", known, ")");
}

Result<FusedActivation> ReadActivation(const ir::Node& node) {
  auto a = ParseActivation(node.attr_string("activation", ""), node.attr_floats("activation_params"));
  if (!a.ok()) return InvalidArgument(node.Label(), ": ", a.status().message());
  return a;
}

void SetActivationAttrs(const FusedActivation& a, std::map<std::string, ir::Attribute>& attrs) {
  attrs["activation"] = ir::Attribute::String(ActivationName(a.kind));
  if (ActivationParamCount(a.kind) > 0) attrs["activation_params"] = ir::Attribute::Floats(ActivationParams(a));
}

float ApplyActivation(const FusedActivation& a, float x) {
  switch (a.kind) {
    case Activation::kNone:
      return x;
    case Activation::kRelu:
      return x > 0.f ? x : 0.f;
    case Activation::kSigmoid:
      return 1.f / (1.f + std::exp(-x));
    case Activation::kSiLU:
      return x / (1.f + std::exp(-x));
    case Activation::kTanh:
      return std::tanh(x);
    case Activation::kHardSwish:
      return x * std::fmax(0.f, std::fmin(1.f, x / 6.f + 0.5f));
    case Activation::kGelu:
      return 0.5f * x * (1.f + std::erf(x / std::sqrt(2.f)));
    case Activation::kGeluTanh:
      return 0.5f * x * (1.f + std::tanh(std::sqrt(2.f / static_cast<float>(M_PI)) * (x + 0.044715f * x * x * x)));
    case Activation::kLeakyRelu:
      return x >= 0.f ? x : a.p0 * x;
    case Activation::kClip:
      return std::fmin(std::fmax(x, a.p0), a.p1);
    case Activation::kHardSigmoid:
      return std::fmax(0.f, std::fmin(1.f, a.p0 * x + a.p1));
  }
  return x;
}

namespace {

// The base op whose inference/kernel a fused op reuses, and how many of the
// fused op's inputs belong to it.
struct Base {
  const char* op_type;
  size_t inputs;
};
Base BaseOf(const std::string& fused) {
  if (fused == "FusedConv" || fused == "FusedConvPool") return {"Conv", 3};
  if (fused == "FusedGemm") return {"Gemm", 3};
  if (fused == "FusedBatchNorm") return {"BatchNormalization", 5};
  return {"MatMul", 2};
}

// Inputs added to the base op's result before the activation: FusedConv's Z (3), FusedMatMul's
// bias (2) and residual (3), FusedGemm's residual (3; its C belongs to the Gemm).
std::vector<size_t> Addends(const std::string& fused) {
  if (fused == "FusedMatMul") return {2, 3};
  if (fused == "FusedBatchNorm" || fused == "FusedConvPool") return {};
  return {3};
}

std::vector<InferInput> Prefix(const InferContext& ctx, size_t n) {
  std::vector<InferInput> in;
  for (size_t i = 0; i < std::min(n, ctx.num_inputs()); ++i) in.push_back(ctx.input(i));
  return in;
}

Status InferFused(InferContext& ctx) {
  const Base base = BaseOf(ctx.node().op_type);
  const OpDef* def = FindOp("", base.op_type);
  if (def == nullptr) return ctx.NotSupported("base op ", base.op_type, " is not available");
  auto act = ParseActivation(ctx.node().attr_string("activation", ""), ctx.node().attr_floats("activation_params"));
  if (!act.ok()) return ctx.Error(act.status().message());
  InferContext inner(ctx.node(), ctx.opset(), Prefix(ctx, base.inputs));
  SP_RETURN_IF_ERROR(def->infer(inner));
  const ir::TensorType& out = inner.output(0);
  if (!IsFloatDType(out.dtype)) return ctx.NotSupported("fused epilogue on ", DTypeName(out.dtype));
  size_t most = base.inputs;
  for (size_t extra : Addends(ctx.node().op_type)) most = std::max(most, extra + 1);
  if (ctx.num_inputs() > most) return ctx.Error("takes at most ", most, " inputs, got ", ctx.num_inputs());
  // The addends must broadcast to the output.
  for (size_t extra : Addends(ctx.node().op_type)) {
    if (!ctx.has_input(extra)) continue;
    if (ctx.input_dtype(extra) != out.dtype) return ctx.Error("input ", extra, " must be ", DTypeName(out.dtype));
    if (out.dims && ctx.input_dims(extra)) {
      SP_ASSIGN_OR_RETURN(ir::Dims d, BroadcastDims(ctx, *out.dims, *ctx.input_dims(extra)));
      if (d.size() != out.dims->size()) return ctx.Error("input ", extra, " does not broadcast to the output");
    }
  }
  ctx.set_output(0, out.dtype, out.dims);
  return Status::Ok();
}

Status RunFused(KernelContext& ctx) {
  const Base base = BaseOf(ctx.node.op_type);
  const OpDef* def = FindOp("", base.op_type);
  std::vector<const Tensor*> base_inputs(
      ctx.inputs.begin(), ctx.inputs.begin() + static_cast<long>(std::min(base.inputs, ctx.inputs.size())));
  KernelContext inner{ctx.node, ctx.opset, base_inputs, {ctx.out(0)}, ctx.infer};
  SP_RETURN_IF_ERROR(def->run(inner));
  Tensor& y = inner.outputs[0];
  std::vector<const Tensor*> adds;
  for (size_t extra : Addends(ctx.node.op_type))
    if (ctx.has_input(extra)) adds.push_back(ctx.inputs[extra]);
  SP_ASSIGN_OR_RETURN(const FusedActivation act, ReadActivation(ctx.node));
  const float out_scale = ctx.node.attr_float("output_scale", 1.f);
  const float out_bias = ctx.node.attr_float("output_bias", 0.f);
  Status st = DispatchDType(y.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T> || kIsReducedFloat<T>) {
      // The sum in float, rounded once (as a fused epilogue does).
      std::vector<float> acc(static_cast<size_t>(y.numel()));
      T* py = y.mutable_data<T>();
      for (int64_t i = 0; i < y.numel(); ++i) acc[static_cast<size_t>(i)] = static_cast<float>(py[i]);
      for (const Tensor* add : adds) {
        const T* pz = add->data<T>();
        ForEachBroadcast<1>(y.shape(), {add->shape()}, [&](int64_t i, const std::array<int64_t, 1>& o) {
          acc[static_cast<size_t>(i)] += static_cast<float>(pz[o[0]]);
        });
      }
      for (int64_t i = 0; i < y.numel(); ++i)
        py[i] = ConvertElement<T>(ApplyActivation(act, acc[static_cast<size_t>(i)]) * out_scale + out_bias);
    }
  });
  ctx.out(0) = y;
  return st;
}

// FusedConvPool as the two ops it replaces, on a private two-node graph: a FusedConv with
// the node's own attributes, and a MaxPool with the pool_* ones.
struct ConvPoolGraph {
  ir::Graph g;
  ir::Node* conv = nullptr;
  ir::Node* pool = nullptr;
};

Result<std::unique_ptr<ConvPoolGraph>> SplitConvPool(const ir::Node& fused, size_t inputs) {
  auto cp = std::make_unique<ConvPoolGraph>();
  ir::Graph& g = cp->g;
  std::vector<ir::Value*> ins;
  for (size_t i = 0; i < std::min<size_t>(inputs, 3); ++i) {
    SP_ASSIGN_OR_RETURN(ir::Value * v, g.AddValue(StrCat("in", i)));
    ins.push_back(v);
  }
  SP_ASSIGN_OR_RETURN(ir::Value * c, g.AddValue("conv"));
  SP_ASSIGN_OR_RETURN(ir::Value * y, g.AddValue("pool"));
  SP_ASSIGN_OR_RETURN(cp->conv, g.AddNode("FusedConv", ins, {c}, fused.name));
  cp->conv->domain = kSampanDomain;
  SP_ASSIGN_OR_RETURN(cp->pool, g.AddNode("MaxPool", {c}, {y}, fused.name + "/pool"));
  static const std::pair<const char*, const char*> kPoolAttrs[] = {{"pool_kernel_shape", "kernel_shape"},
                                                                   {"pool_strides", "strides"},
                                                                   {"pool_pads", "pads"},
                                                                   {"pool_dilations", "dilations"},
                                                                   {"pool_ceil_mode", "ceil_mode"}};
  for (const auto& [key, attr] : fused.attrs) {
    bool pool = false;
    for (const auto& [from, to] : kPoolAttrs)
      if (key == from) {
        cp->pool->attrs[to] = attr;
        pool = true;
      }
    if (!pool) cp->conv->attrs[key] = attr;
  }
  if (!cp->pool->has_attr("kernel_shape"))
    return InvalidArgument(fused.Label(), ": attribute pool_kernel_shape is missing");
  return cp;
}

Status InferFusedConvPool(InferContext& ctx) {
  if (ctx.num_inputs() > 3) return ctx.Error("takes at most 3 inputs, got ", ctx.num_inputs());
  SP_ASSIGN_OR_RETURN(auto cp, SplitConvPool(ctx.node(), ctx.num_inputs()));
  InferContext conv(*cp->conv, ctx.opset(), Prefix(ctx, 3));
  SP_RETURN_IF_ERROR(InferFused(conv));
  InferContext pool(*cp->pool, ctx.opset(), {InferInput{true, conv.output(0).dtype, conv.output(0).dims, nullptr}});
  SP_RETURN_IF_ERROR(FindOp("", "MaxPool")->infer(pool));
  if (pool.num_outputs() < 1) return ctx.Error("pool inference gave no output");
  ctx.set_output(0, pool.output(0).dtype, pool.output(0).dims);
  return Status::Ok();
}

Status RunFusedConvPool(KernelContext& ctx) {
  SP_ASSIGN_OR_RETURN(auto cp, SplitConvPool(ctx.node, ctx.inputs.size()));
  std::vector<const Tensor*> conv_in(ctx.inputs.begin(),
                                     ctx.inputs.begin() + static_cast<long>(std::min<size_t>(ctx.inputs.size(), 3)));
  std::vector<Tensor> c, y;
  SP_RETURN_IF_ERROR(RunNode(*cp->conv, ctx.opset, conv_in, &c));
  SP_RETURN_IF_ERROR(RunNode(*cp->pool, ctx.opset, {&c[0]}, &y));
  SetKernelOutput(ctx, 0, std::move(y[0]));
  return Status::Ok();
}

SAMPAN_REGISTER_DOMAIN_OP("sampan", "FusedConv", InferFused, RunFused);
SAMPAN_REGISTER_DOMAIN_OP("sampan", "FusedConvPool", InferFusedConvPool, RunFusedConvPool);
SAMPAN_REGISTER_DOMAIN_OP("sampan", "FusedGemm", InferFused, RunFused);
SAMPAN_REGISTER_DOMAIN_OP("sampan", "FusedMatMul", InferFused, RunFused);
SAMPAN_REGISTER_DOMAIN_OP("sampan", "FusedBatchNorm", InferFused, RunFused);

}  // namespace
}  // namespace sampan::ops
