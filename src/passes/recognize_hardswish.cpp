// Recognises HardSwish written out in primitive ops (as PaddlePaddle and older
// exporters write it) so fuse_activation can put it into the conv epilogue:
//   Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)      (Mul operands in either order;
//   Mul(..., 1/6) instead of Div(..., 6); Add(3, x))
//   Mul(x, HardSigmoid(x) {alpha = 1/6, beta = 0.5})
// -> HardSwish(x).
#include <cmath>

#include "passes/fusion_util.h"

namespace sampan::passes {
namespace {

bool Near(std::optional<double> v, double want) {
  return v && std::fabs(*v - want) <= 1e-5 * std::max(1.0, std::fabs(want));
}

// Clip bounds: inputs 1/2 (opset >= 11) or attributes min/max (older).
bool ClipIs0To6(const ir::Node* clip) {
  if (clip->num_inputs() >= 3 && clip->input(1) && clip->input(2))
    return Near(ScalarConst(clip->input(1)), 0.0) && Near(ScalarConst(clip->input(2)), 6.0);
  if (clip->num_inputs() == 1 && clip->has_attr("min") && clip->has_attr("max"))
    return Near(clip->attr_float("min", -1), 0.0) && Near(clip->attr_float("max", -1), 6.0);
  return false;
}

Result<bool> MatchOne(ir::Graph& graph, PassContext& ctx) {
  for (const auto& up : graph.nodes()) {
    ir::Node* gate = up.get();  // Clip(Add(x,3),0,6) or HardSigmoid(x)
    ir::Value* x = nullptr;
    std::vector<ir::Node*> nodes;
    bool needs_div6 = false;
    if (Is(gate, "Clip") && ClipIs0To6(gate)) {
      ir::Node* add = gate->input(0)->producer();
      if (!Is(add, "Add")) continue;
      if (Near(ScalarConst(add->input(1)), 3.0))
        x = add->input(0);
      else if (Near(ScalarConst(add->input(0)), 3.0))
        x = add->input(1);
      if (!x) continue;
      nodes = {add, gate};
      needs_div6 = true;
    } else if (Is(gate, "HardSigmoid") && Near(gate->attr_float("alpha", 0.2f), 1.0 / 6.0) &&
               Near(gate->attr_float("beta", 0.5f), 0.5)) {
      x = gate->input(0);
      nodes = {gate};
    } else {
      continue;
    }
    ir::Node* mul = SoleUser(graph, gate->output(0));
    if (!Is(mul, "Mul") || Other(mul, gate->output(0)) != x) continue;
    nodes.push_back(mul);
    ir::Value* y = mul->output(0);
    if (needs_div6) {
      ir::Node* scale = SoleUser(graph, mul->output(0));
      const bool div6 =
          Is(scale, "Div") && scale->input(0) == mul->output(0) && Near(ScalarConst(scale->input(1)), 6.0);
      const bool mul16 = Is(scale, "Mul") && Near(ScalarConst(Other(scale, mul->output(0))), 1.0 / 6.0);
      if (!div6 && !mul16) continue;
      nodes.push_back(scale);
      y = scale->output(0);
    }
    // Intermediates must not escape (x itself may have other readers).
    bool private_ok = true;
    for (ir::Node* n : nodes)
      if (n->output(0) != y && (IsGraphOutput(graph, n->output(0)) || n->output(0)->uses().size() != 1))
        private_ok = false;
    if (!private_ok || !IsFusableFloat(x->type.dtype)) continue;
    const std::string name = gate->name + "_hardswish";
    SP_RETURN_IF_ERROR(ReplaceWithFused(graph, nodes, "", "HardSwish", name, {x}, {}, y).status());
    ctx.Record(StrCat("recognised HardSwish from ", nodes.size(), " nodes at ", name));
    return true;
  }
  return false;
}

Result<bool> RecognizeHardSwish(ir::Graph& graph, PassContext& ctx) {
  return RewriteToFixpoint(graph, ctx, MatchOne);
}

}  // namespace

SAMPAN_REGISTER_PASS("recognize_hardswish", RecognizeHardSwish);

}  // namespace sampan::passes
