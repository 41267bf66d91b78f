#include "backends/cuda/fuse_quantized_outputs.h"

#include <cmath>

#include "backends/cuda/lowering_pass.h"
#include "base/tensor.h"
#include "ops/numpy_rounding.h"
#include "passes/fusion_util.h"

namespace sampan::cuda {
namespace {

bool KernelFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}

bool Float8(DType t) {
  return t == DType::kFloat8E4M3FN || t == DType::kFloat8E5M2;
}

// A positive finite constant of one value.
bool PositiveScale(const ir::Value* v) {
  if (!v || !v->is_constant() || v->data.numel() != 1) return false;
  const double s = ElementAsDouble(v->data, 0);
  return s > 0 && std::isfinite(s);
}

// A constant that is all zeros.
bool ZeroConstant(const ir::Value* v) {
  if (!v || !v->is_constant()) return false;
  for (int64_t i = 0; i < v->data.numel(); ++i)
    if (ElementAsDouble(v->data, i) != 0) return false;
  return true;
}

// A QuantizeLinear (either domain) a kernel can write as its own float8 output: per tensor, a
// constant positive scale, no zero point (or 0), a quotient type the device has, of a float
// activation the kernels produce.
bool WritableQuantize(const ir::Node* q) {
  if (q->op_type != "QuantizeLinear" || (q->domain != "" && q->domain != "sampan")) return false;
  if (q->num_outputs() != 1 || !q->output(0) || !Float8(q->output(0)->type.dtype)) return false;
  if (!PositiveScale(q->input(1)) || (q->num_inputs() > 2 && q->input(2) && !ZeroConstant(q->input(2)))) return false;
  if (q->attr_int("block_size", 0) != 0 || q->attr_int("saturate", 1) < 0 || q->attr_int("saturate", 1) > 1)
    return false;
  if (!KernelFloat(q->input(0)->type.dtype)) return false;
  auto p = QuantizedOutputQuotientType(*q, q->input(0)->type.dtype, q->input(1)->type.dtype);
  if (!p.ok()) return false;
  // The scale as the kernels use it, rounded to the quotient type (Float8OutputParams): one that
  // rounds to 0 or inf there stays a QuantizeLinear rather than leave the producer on the host.
  const double s = ops::RoundTo(*p, ElementAsDouble(q->input(1)->data, 0));
  return s > 0 && std::isfinite(s);
}

// The QuantizeLinear's own attributes, as the fused node's.
void CopyQuantizeAttrs(const ir::Node& q, std::map<std::string, ir::Attribute>* attrs) {
  (*attrs)["output_dtype"] = ir::Attribute::Int(static_cast<int64_t>(q.output(0)->type.dtype));
  (*attrs)["saturate"] = ir::Attribute::Int(q.attr_int("saturate", 1));
  if (q.attr_int("precision", 0) != 0) (*attrs)["precision"] = ir::Attribute::Int(q.attr_int("precision", 0));
}

// The first quantize of a layer norm's output that the norm can write beside its own, or
// nullptr. The norm: LayerNormalization without Mean / InvStdDev outputs, or an AddLayerNorm
// with no quantized output yet.
ir::Node* NextQuantizedNorm(const ir::Graph& g) {
  for (const auto& up : g.nodes()) {
    ir::Node* q = up.get();
    if (!WritableQuantize(q)) continue;
    const ir::Node* norm = q->input(0)->producer();
    if (norm == nullptr) continue;
    if (passes::Is(norm, "LayerNormalization")) {
      bool stats = false;
      for (size_t i = 1; i < norm->num_outputs(); ++i) stats |= norm->output(i) != nullptr;
      if (stats || norm->num_inputs() < 2 || !norm->input(1)) continue;
      return q;
    }
    if (norm->op_type == "AddLayerNorm" && norm->domain == "sampan" && norm->num_outputs() == 1) return q;
  }
  return nullptr;
}

// Views a float8 tensor passes through unchanged (data input 0).
bool IsView(const ir::Node* n) {
  return passes::Is(n, "Reshape") || passes::Is(n, "Flatten") || passes::Is(n, "Squeeze") || passes::Is(n, "Unsqueeze");
}

// The first quantize of an attention's output (through single-use views) and that attention,
// or {nullptr, nullptr}. The attention has no quantized output yet.
std::pair<ir::Node*, ir::Node*> NextQuantizedAttention(const ir::Graph& g) {
  for (const auto& up : g.nodes()) {
    ir::Node* q = up.get();
    if (!WritableQuantize(q)) continue;
    const ir::Value* x = q->input(0);
    ir::Node* p = x->producer();
    bool ok = passes::HasSingleUse(g, x);
    while (ok && IsView(p)) {
      x = p->input(0);
      p = x ? x->producer() : nullptr;
      ok = x != nullptr && passes::HasSingleUse(g, x);
    }
    if (!ok || p == nullptr || p->op_type != "Attention" || p->domain != "sampan" || p->num_inputs() > 4) continue;
    if (p->num_outputs() != 1 || p->output(0) != x || x->type.dtype != q->input(0)->type.dtype) continue;
    bool graph_output = false;
    for (const ir::Value* o : g.outputs()) graph_output |= o == q->output(0);
    if (graph_output) continue;  // its name would change
    return {q, p};
  }
  return {nullptr, nullptr};
}

}  // namespace

Result<DType> QuantizedOutputQuotientType(const ir::Node& node, DType x, DType scale) {
  auto device = [](DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; };
  if (!device(scale))
    return Unsupported(node.Label(), ": a ", DTypeName(scale), " scale (float32/16, bfloat16 run here)");
  DType p = x == scale ? x : DType::kFloat32;
  if (const int64_t prec = node.attr_int("precision", 0); prec != 0) p = static_cast<DType>(prec);
  if (!device(p)) return Unsupported(node.Label(), ": quotient precision ", DTypeName(p));
  return p;
}

Result<Float8Out> Float8OutputParams(const ir::Node& node, DType x, const KernelInput& scale, DType yq) {
  Float8Out q;
  if (yq != DType::kFloat8E4M3FN && yq != DType::kFloat8E5M2)
    return Unsupported(node.Label(), ": a quantized output of type ", DTypeName(yq),
                       " (float8 e4m3fn and e5m2 run on the device)");
  q.e5m2 = yq == DType::kFloat8E5M2;
  if (!scale.present || scale.host == nullptr || scale.host->numel() != 1)
    return Unsupported(node.Label(), ": the output scale is not one constant value");
  SP_ASSIGN_OR_RETURN(const DType p, QuantizedOutputQuotientType(node, x, scale.dtype));
  q.precision = p == DType::kFloat16 ? QFloat::kF16 : p == DType::kBFloat16 ? QFloat::kBF16 : QFloat::kF32;
  q.scale = static_cast<float>(ops::RoundTo(p, ElementAsDouble(*scale.host, 0)));
  if (!(q.scale > 0) || !std::isfinite(q.scale))
    return Unsupported(node.Label(), ": the output scale ", q.scale, " is not positive and finite");
  q.inv_scale = q.scale >= 0x1p-64f && q.scale <= 0x1p64f ? 1.f / q.scale : 0.f;  // DivRnReciprocal's bound
  const int64_t sat = node.attr_int("saturate", 1);
  if (sat != 0 && sat != 1) return Unsupported(node.Label(), ": saturate ", sat);
  q.saturate = sat != 0;
  return q;
}

Result<std::vector<std::string>> FuseNormQuantize(plan::Plan& plan) {
  ir::Graph& g = *plan.graph;
  std::vector<std::string> done;
  while (ir::Node* q = NextQuantizedNorm(g)) {
    ir::Node* norm = q->input(0)->producer();
    const bool plain = norm->op_type == "LayerNormalization";
    // AddLayerNorm(A, B?, Scale, Bias?, YScale): a plain LayerNormalization has no B.
    std::vector<ir::Value*> inputs = {norm->input(0), plain ? nullptr : norm->input(1), norm->input(plain ? 1 : 2),
                                      nullptr, q->input(1)};
    const size_t bias = plain ? 2 : 3;
    if (norm->num_inputs() > bias) inputs[3] = norm->input(bias);
    std::map<std::string, ir::Attribute> attrs = norm->attrs;
    CopyQuantizeAttrs(*q, &attrs);
    ir::Value* y = norm->output(0);
    ir::Value* yq = q->output(0);
    const std::string norm_name = norm->name, q_name = q->name, norm_label = norm->Label();
    SP_ASSIGN_OR_RETURN(ir::Node * fused, passes::ReplaceWithFused(g, {q, norm}, "sampan", "AddLayerNorm", norm_name,
                                                                   inputs, attrs, {y, yq}));
    plan.choices.erase(q_name);
    done.push_back(StrCat("cuda: ", norm_label, " + QuantizeLinear '", q_name, "' -> ", fused->Label(), " writing its ",
                          DTypeName(yq->type.dtype), " copy"));
    plan.rewrites.push_back(done.back());
  }
  if (!done.empty()) SP_RETURN_IF_ERROR(passes::FinishRewrite(g));
  return done;
}

Result<std::vector<std::string>> FuseAttentionQuantize(plan::Plan& plan) {
  ir::Graph& g = *plan.graph;
  std::vector<std::string> done;
  for (auto [q, att] = NextQuantizedAttention(g); q != nullptr; std::tie(q, att) = NextQuantizedAttention(g)) {
    // Attention(Q, K?, V?, mask?, YScale); its output (and the views after it) become float8
    // when the types are inferred again, and the quantize's readers read the last view.
    std::vector<ir::Value*> inputs(4, nullptr);
    for (size_t i = 0; i < att->num_inputs() && i < 4; ++i) inputs[i] = att->input(i);
    inputs.push_back(q->input(1));
    std::map<std::string, ir::Attribute> attrs = att->attrs;
    CopyQuantizeAttrs(*q, &attrs);
    ir::Value* y = att->output(0);
    ir::Value* x = q->input(0);  // y, or the last view of it
    ir::Value* yq = q->output(0);
    const std::string att_name = att->name, q_name = q->name, att_label = att->Label();
    const DType qtype = yq->type.dtype;
    const bool views = x != y;
    // The attention's output and the views after it now hold float8.
    for (ir::Value* v = y;; v = passes::SoleUser(g, v)->output(0)) {
      v->type.dtype = qtype;
      if (v == x) break;
    }
    g.ReplaceAllUsesWith(yq, x);
    g.RemoveNode(q);
    SP_ASSIGN_OR_RETURN(ir::Node * fused,
                        passes::ReplaceWithFused(g, {att}, "sampan", "Attention", att_name, inputs, attrs, y));
    plan.choices.erase(q_name);
    done.push_back(StrCat("cuda: ", att_label, " + QuantizeLinear '", q_name, "' -> ", fused->Label(), " writing ",
                          DTypeName(qtype), views ? " (through its views)" : ""));
    plan.rewrites.push_back(done.back());
  }
  if (!done.empty()) SP_RETURN_IF_ERROR(passes::FinishRewrite(g));
  return done;
}

SAMPAN_REGISTER_TARGET_PASS("cuda", "fuse_norm_quantize", (PlanRewritePass<FuseNormQuantize>));

SAMPAN_REGISTER_TARGET_PASS("cuda", "fuse_attention_quantize", (PlanRewritePass<FuseAttentionQuantize>));

}  // namespace sampan::cuda
