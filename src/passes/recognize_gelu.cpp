// Recognises GELU written out in primitive ops:
//   exact: 0.5 * x * (1 + Erf(x / sqrt(2)))        (x * 0.70710678 also accepted)
//   tanh:  0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
// in either multiplication order -> Gelu(x) {approximate = none | tanh}.
#include <cmath>

#include "passes/fusion_util.h"

namespace sampan::passes {
namespace {

bool Near(std::optional<double> v, double want) {
  return v && std::fabs(*v - want) <= 1e-4 * std::fabs(want);
}

// x for the exact form's Erf argument: Div(x, sqrt2) or Mul(x, 1/sqrt2).
ir::Value* ErfArgument(ir::Node* n) {
  if (Is(n, "Div") && Near(ScalarConst(n->input(1)), std::sqrt(2.0))) return n->input(0);
  if (Is(n, "Mul")) {
    if (Near(ScalarConst(n->input(1)), std::sqrt(0.5))) return n->input(0);
    if (Near(ScalarConst(n->input(0)), std::sqrt(0.5))) return n->input(1);
  }
  return nullptr;
}

// x for the tanh form's argument: Mul(sqrt(2/pi), Add(x, Mul(0.044715, Pow(x, 3)))).
ir::Value* TanhArgument(ir::Node* n, std::vector<ir::Node*>* nodes) {
  if (!Is(n, "Mul")) return nullptr;
  const double k = std::sqrt(2.0 / M_PI);
  ir::Value* inner = Near(ScalarConst(n->input(1)), k)   ? n->input(0)
                     : Near(ScalarConst(n->input(0)), k) ? n->input(1)
                                                         : nullptr;
  ir::Node* add = inner ? inner->producer() : nullptr;
  if (!Is(add, "Add")) return nullptr;
  for (int side = 0; side < 2; ++side) {
    ir::Value* x = add->input(static_cast<size_t>(side));
    ir::Node* mul = add->input(static_cast<size_t>(1 - side))->producer();
    if (!Is(mul, "Mul")) continue;
    ir::Value* cube = Near(ScalarConst(mul->input(0)), 0.044715)   ? mul->input(1)
                      : Near(ScalarConst(mul->input(1)), 0.044715) ? mul->input(0)
                                                                   : nullptr;
    ir::Node* pow = cube ? cube->producer() : nullptr;
    if (!Is(pow, "Pow") || pow->input(0) != x || !Near(ScalarConst(pow->input(1)), 3.0)) continue;
    *nodes = {pow, mul, add, n};
    return x;
  }
  return nullptr;
}

Result<bool> MatchOne(ir::Graph& graph, PassContext& ctx) {
  for (const auto& up : graph.nodes()) {
    ir::Node* f = up.get();  // Erf or Tanh
    const bool exact = Is(f, "Erf");
    if (!exact && !Is(f, "Tanh")) continue;
    std::vector<ir::Node*> nodes;
    ir::Node* arg = f->input(0)->producer();
    ir::Value* x = nullptr;
    if (exact) {
      x = arg ? ErfArgument(arg) : nullptr;
      if (x) nodes = {arg};
    } else if (arg) {
      x = TanhArgument(arg, &nodes);
    }
    if (x == nullptr) continue;
    nodes.push_back(f);
    ir::Node* plus1 = SoleUser(graph, f->output(0));
    if (!Is(plus1, "Add") || !Near(ScalarConst(Other(plus1, f->output(0))), 1.0)) continue;
    nodes.push_back(plus1);
    ir::Node* m1 = SoleUser(graph, plus1->output(0));
    if (!Is(m1, "Mul")) continue;
    nodes.push_back(m1);
    ir::Value* t = Other(m1, plus1->output(0));
    ir::Value* y = nullptr;
    if (t == x) {  // (x * (1 + f)) * 0.5
      ir::Node* m2 = SoleUser(graph, m1->output(0));
      if (!Is(m2, "Mul") || !Near(ScalarConst(Other(m2, m1->output(0))), 0.5)) continue;
      nodes.push_back(m2);
      y = m2->output(0);
    } else {  // (x * 0.5) * (1 + f)
      ir::Node* half = t->producer();
      if (!Is(half, "Mul") || !HasSingleUse(graph, t)) continue;
      if (!((half->input(0) == x && Near(ScalarConst(half->input(1)), 0.5)) ||
            (half->input(1) == x && Near(ScalarConst(half->input(0)), 0.5))))
        continue;
      nodes.push_back(half);
      y = m1->output(0);
    }
    // Intermediates other than x must not escape.
    bool private_ok = true;
    for (ir::Node* n : nodes)
      if (n->output(0) != y && (IsGraphOutput(graph, n->output(0)) || n->output(0)->uses().size() != 1))
        private_ok = false;
    if (!private_ok) continue;
    std::map<std::string, ir::Attribute> attrs;
    attrs["approximate"] = ir::Attribute::String(exact ? "none" : "tanh");
    std::string name = f->name + "_gelu";
    SP_RETURN_IF_ERROR(ReplaceWithFused(graph, nodes, "", "Gelu", name, {x}, attrs, y).status());
    ctx.Record(StrCat("recognised Gelu (", exact ? "erf" : "tanh", ") from ", nodes.size(), " nodes at ", name));
    return true;
  }
  return false;
}

Result<bool> RecognizeGelu(ir::Graph& graph, PassContext& ctx) {
  return RewriteToFixpoint(graph, ctx, MatchOne);
}

}  // namespace

SAMPAN_REGISTER_PASS("recognize_gelu", RecognizeGelu);

}  // namespace sampan::passes
