// Conv/Gemm/MatMul (or their fused forms without an activation yet) followed by
// an activation -> one fused node with the activation in its epilogue.
// Relu, Clip (Relu6), Sigmoid, SiLU = x*sigmoid(x), HardSigmoid, HardSwish,
// LeakyRelu, GELU, Tanh.
#include "passes/fusion_util.h"

namespace sampan::passes {
namespace {

// The fused op a producer becomes, or empty if it cannot take an activation.
std::string FusedTarget(const ir::Node* n) {
  if (n->domain.empty()) {
    if (n->op_type == "Conv") return "FusedConv";
    if (n->op_type == "Gemm") return "FusedGemm";
    if (n->op_type == "MatMul") return "FusedMatMul";
    return {};
  }
  if (n->domain == "sampan" && n->attr_string("activation", "").empty() &&
      (n->op_type == "FusedConv" || n->op_type == "FusedGemm" || n->op_type == "FusedMatMul"))
    return n->op_type;
  return {};
}

Result<bool> FuseOne(ir::Graph& graph, PassContext& ctx) {
  for (const auto& up : graph.nodes()) {
    ir::Node* prod = up.get();
    std::string target = FusedTarget(prod);
    if (target.empty() || prod->num_outputs() != 1) continue;
    ir::Value* y = prod->output(0);
    if (!IsFusableFloat(y->type.dtype)) continue;
    auto m = MatchActivation(graph, y);
    if (!m) continue;
    auto attrs = prod->attrs;
    ops::SetActivationAttrs(m->act, attrs);
    std::vector<ir::Value*> inputs = prod->inputs();
    std::string label = prod->Label(), name = prod->name, act_label = m->nodes.front()->Label();
    std::vector<ir::Node*> old = m->nodes;
    old.push_back(prod);
    SP_RETURN_IF_ERROR(ReplaceWithFused(graph, old, "sampan", target, name, inputs, attrs, m->output).status());
    ctx.Record(StrCat("fused ", ops::ActivationName(m->act.kind), " (", act_label, ") into ", label));
    return true;
  }
  return false;
}

Result<bool> FuseActivation(ir::Graph& graph, PassContext& ctx) {
  return RewriteToFixpoint(graph, ctx, FuseOne);
}

}  // namespace

SAMPAN_REGISTER_PASS("fuse_activation", FuseActivation);

}  // namespace sampan::passes
