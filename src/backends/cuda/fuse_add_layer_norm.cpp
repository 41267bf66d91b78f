#include "backends/cuda/fuse_add_layer_norm.h"

#include <cmath>

#include "base/tensor.h"
#include "ops/run_node.h"
#include "passes/fusion_util.h"

namespace sampan::cuda {
namespace {

bool KernelFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; }

// The first LayerNormalization fed by a single-use Add of its own type, or nullptr.
ir::Node* NextMatch(const ir::Graph& g) {
  for (const auto& up : g.nodes()) {
    ir::Node* ln = up.get();
    if (!passes::Is(ln, "LayerNormalization") || ln->num_inputs() < 2 || !ln->input(1)) continue;
    bool stats = false;  // Mean / InvStdDev outputs: the fused op has none
    for (size_t i = 1; i < ln->num_outputs(); ++i) stats |= ln->output(i) != nullptr;
    if (stats) continue;
    const ir::Value* s = ln->input(0);
    const ir::Node* add = s->producer();
    if (!passes::Is(add, "Add") || !passes::HasSingleUse(g, s) || !KernelFloat(s->type.dtype)) continue;
    if (add->input(0)->type.dtype != s->type.dtype || add->input(1)->type.dtype != s->type.dtype) continue;
    return ln;
  }
  return nullptr;
}

bool Float8(DType t) { return t == DType::kFloat8E4M3FN || t == DType::kFloat8E5M2; }

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

// The first per-tensor float8 QuantizeLinear (either domain) of a layer norm's output that the
// norm can write beside its own, or nullptr. The norm: LayerNormalization without Mean /
// InvStdDev outputs, or an AddLayerNorm with no quantized output yet.
ir::Node* NextQuantizedNorm(const ir::Graph& g) {
  for (const auto& up : g.nodes()) {
    ir::Node* q = up.get();
    if (q->op_type != "QuantizeLinear" || (q->domain != "" && q->domain != "sampan")) continue;
    if (q->num_outputs() != 1 || !q->output(0) || !Float8(q->output(0)->type.dtype)) continue;
    if (!PositiveScale(q->input(1)) || (q->num_inputs() > 2 && q->input(2) && !ZeroConstant(q->input(2)))) continue;
    if (q->attr_int("block_size", 0) != 0 || q->attr_int("saturate", 1) < 0 || q->attr_int("saturate", 1) > 1) continue;
    const ir::Node* norm = q->input(0)->producer();
    if (!KernelFloat(q->input(0)->type.dtype) || norm == nullptr) continue;
    if (!NormQuotientType(*q, q->input(0)->type.dtype, q->input(1)->type.dtype).ok()) continue;
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

}  // namespace

Result<DType> NormQuotientType(const ir::Node& node, DType x, DType scale) {
  auto device = [](DType t) { return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16; };
  if (!device(scale)) return Unsupported(node.Label(), ": a ", DTypeName(scale), " scale (float32/16, bfloat16 run here)");
  DType p = x == scale ? x : DType::kFloat32;
  if (const int64_t prec = node.attr_int("precision", 0); prec != 0) p = static_cast<DType>(prec);
  if (!device(p)) return Unsupported(node.Label(), ": quotient precision ", DTypeName(p));
  return p;
}

Result<std::vector<std::string>> FuseNormQuantize(plan::Plan& plan) {
  ir::Graph& g = *plan.graph;
  std::vector<std::string> done;
  while (ir::Node* q = NextQuantizedNorm(g)) {
    ir::Node* norm = q->input(0)->producer();
    const bool plain = norm->op_type == "LayerNormalization";
    // AddLayerNorm(A, B?, Scale, Bias?, YScale): a plain LayerNormalization has no B.
    std::vector<ir::Value*> inputs = {norm->input(0), plain ? nullptr : norm->input(1),
                                      norm->input(plain ? 1 : 2), nullptr, q->input(1)};
    const size_t bias = plain ? 2 : 3;
    if (norm->num_inputs() > bias) inputs[3] = norm->input(bias);
    std::map<std::string, ir::Attribute> attrs = norm->attrs;
    attrs["output_dtype"] = ir::Attribute::Int(static_cast<int64_t>(q->output(0)->type.dtype));
    attrs["saturate"] = ir::Attribute::Int(q->attr_int("saturate", 1));
    if (q->attr_int("precision", 0) != 0) attrs["precision"] = ir::Attribute::Int(q->attr_int("precision", 0));
    ir::Value* y = norm->output(0);
    ir::Value* yq = q->output(0);
    const std::string norm_name = norm->name, q_name = q->name, norm_label = norm->Label();
    SP_ASSIGN_OR_RETURN(ir::Node * fused,
                        passes::ReplaceWithFused(g, {q, norm}, "sampan", "AddLayerNorm", norm_name, inputs, attrs, {y, yq}));
    plan.choices.erase(q_name);
    done.push_back(StrCat("cuda: ", norm_label, " + QuantizeLinear '", q_name, "' -> ", fused->Label(),
                          " writing its ", DTypeName(yq->type.dtype), " copy"));
    plan.rewrites.push_back(done.back());
  }
  if (!done.empty()) SP_RETURN_IF_ERROR(passes::FinishRewrite(g));
  return done;
}

Result<std::vector<std::string>> FuseAddLayerNorm(plan::Plan& plan) {
  ir::Graph& g = *plan.graph;
  std::vector<std::string> done;
  while (ir::Node* ln = NextMatch(g)) {
    ir::Node* add = ln->input(0)->producer();
    std::vector<ir::Value*> inputs = {add->input(0), add->input(1), ln->input(1)};
    if (ln->num_inputs() > 2 && ln->input(2)) inputs.push_back(ln->input(2));
    const std::string add_name = add->name, ln_name = ln->name;
    const std::map<std::string, ir::Attribute> attrs = ln->attrs;
    SP_ASSIGN_OR_RETURN(ir::Node * fused, passes::ReplaceWithFused(g, {add, ln}, "sampan", "AddLayerNorm", ln_name,
                                                                   inputs, attrs, ln->output(0)));
    plan.choices.erase(add_name);
    done.push_back(StrCat("cuda: Add '", add_name, "' + LayerNormalization '", ln_name, "' -> ", fused->Label()));
    plan.rewrites.push_back(done.back());
  }
  if (!done.empty()) SP_RETURN_IF_ERROR(passes::FinishRewrite(g));
  return done;
}

}  // namespace sampan::cuda
