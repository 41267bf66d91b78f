#include "backends/cuda/fuse_norm_activation.h"

#include "backends/cuda/lowering_pass.h"
#include "passes/fusion_util.h"

namespace sampan::cuda {
namespace {

bool KernelFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}

struct Match {
  ir::Node* bn = nullptr;
  passes::ActivationMatch act;
};

std::optional<Match> NextMatch(const ir::Graph& g) {
  for (const auto& up : g.nodes()) {
    ir::Node* bn = up.get();
    if (!passes::Is(bn, "BatchNormalization") || bn->num_inputs() != 5 || !bn->output(0)) continue;
    bool stats = false;  // running mean / variance outputs: the fused op has none
    for (size_t i = 1; i < bn->num_outputs(); ++i) stats |= bn->output(i) != nullptr;
    if (stats || bn->attr_int("training_mode", 0) != 0 || bn->attr_int("spatial", 1) == 0) continue;
    if (!KernelFloat(bn->output(0)->type.dtype)) continue;
    auto act = passes::MatchActivation(g, bn->output(0));
    if (!act) continue;
    return Match{bn, *act};
  }
  return std::nullopt;
}

}  // namespace

Result<std::vector<std::string>> FuseNormActivation(plan::Plan& plan) {
  ir::Graph& g = *plan.graph;
  std::vector<std::string> done;
  while (std::optional<Match> m = NextMatch(g)) {
    ir::Node* bn = m->bn;
    const std::string label = bn->Label(), name = bn->name;
    std::vector<ir::Node*> old = {bn};
    std::vector<std::string> act_names;
    for (ir::Node* n : m->act.nodes) {
      old.push_back(n);
      act_names.push_back(n->name);
    }
    auto attrs = bn->attrs;
    ops::SetActivationAttrs(m->act.act, attrs);
    const std::vector<ir::Value*> inputs(bn->inputs().begin(), bn->inputs().end());
    SP_ASSIGN_OR_RETURN(ir::Node * fused, passes::ReplaceWithFused(g, old, "sampan", "FusedBatchNorm", name, inputs,
                                                                   attrs, m->act.output));
    for (const std::string& a : act_names) plan.choices.erase(a);
    done.push_back(StrCat("cuda: ", label, " + ", ops::ActivationName(m->act.act.kind), " -> ", fused->Label()));
    plan.rewrites.push_back(done.back());
  }
  if (!done.empty()) SP_RETURN_IF_ERROR(passes::FinishRewrite(g));
  return done;
}

SAMPAN_REGISTER_TARGET_PASS("cuda", "fuse_norm_activation", (PlanRewritePass<FuseNormActivation>));

}  // namespace sampan::cuda
