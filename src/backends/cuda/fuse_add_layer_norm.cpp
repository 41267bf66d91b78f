#include "backends/cuda/fuse_add_layer_norm.h"

#include <cmath>

#include "backends/cuda/lowering_pass.h"
#include "base/tensor.h"
#include "ops/run_node.h"
#include "passes/fusion_util.h"

namespace sampan::cuda {
namespace {

bool KernelFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}

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

}  // namespace

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

SAMPAN_REGISTER_TARGET_PASS("cuda", "fuse_add_layer_norm", (PlanRewritePass<FuseAddLayerNorm>));

}  // namespace sampan::cuda
