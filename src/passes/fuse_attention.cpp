// Recognises scaled dot-product attention:
//   s = MatMul(Q, Transpose(K, swap last two) | Kt)
//   s = Div(s, c) | Mul(s, c)            (optional)
//   s = Add(s, mask)                     (optional, additive mask)
//   p = Softmax(s, axis = last)
//   o = MatMul(p, V)
// -> o = sampan::Attention(Q, K|Kt, V, mask) {scale, k_transposed}
#include "passes/fusion_util.h"

namespace sampan::passes {
namespace {


bool SoftmaxOnLastAxis(const ir::Node* sm, int64_t opset) {
  const ir::Value* x = sm->input(0);
  if (!x->type.has_rank()) return false;
  const int64_t rank = static_cast<int64_t>(x->type.dims->size());
  int64_t axis = sm->attr_int("axis", opset >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  return axis == rank - 1;
}

Result<bool> MatchOne(ir::Graph& graph, PassContext& ctx) {
  for (const auto& up : graph.nodes()) {
    ir::Node* sm = up.get();
    if (!Is(sm, "Softmax") || !SoftmaxOnLastAxis(sm, graph.opset())) continue;
    std::vector<ir::Node*> nodes = {sm};
    ir::Node* out_mm = SoleUser(graph, sm->output(0));
    if (!Is(out_mm, "MatMul") || out_mm->input(0) != sm->output(0)) continue;
    nodes.push_back(out_mm);
    ir::Value* v = out_mm->input(1);
    ir::Value* s = sm->input(0);
    ir::Value* mask = nullptr;
    double scale = 1.0;
    ir::Node* n = s->producer();
    if (Is(n, "Add") && HasSingleUse(graph, s)) {
      // The mask is the operand that is not the score chain.
      ir::Node* a = n->input(0)->producer();
      const bool first_is_scores = a && (Is(a, "MatMul") || Is(a, "Div") || Is(a, "Mul"));
      mask = first_is_scores ? n->input(1) : n->input(0);
      s = first_is_scores ? n->input(0) : n->input(1);
      nodes.push_back(n);
      n = s->producer();
    }
    if ((Is(n, "Div") || Is(n, "Mul")) && HasSingleUse(graph, s)) {
      auto c = ScalarConst(n->input(1));
      if (!c || *c == 0.0) continue;
      scale = Is(n, "Div") ? 1.0 / *c : *c;
      nodes.push_back(n);
      s = n->input(0);
      n = s->producer();
    }
    if (!Is(n, "MatMul") || !HasSingleUse(graph, s)) continue;
    nodes.push_back(n);
    ir::Value* q = n->input(0);
    ir::Value* k = n->input(1);
    int64_t k_transposed = 1;
    ir::Node* tr = k->producer();
    if (Is(tr, "Transpose") && HasSingleUse(graph, k) && tr->input(0)->type.has_rank()) {
      const auto perm = tr->attr_ints("perm");
      const size_t r = tr->input(0)->type.dims->size();
      bool swap_last = perm.size() == r && r >= 2;
      for (size_t i = 0; swap_last && i < r; ++i) {
        const int64_t want = i == r - 2 ? static_cast<int64_t>(r - 1) : i == r - 1 ? static_cast<int64_t>(r - 2) : static_cast<int64_t>(i);
        swap_last = perm[i] == want;
      }
      if (swap_last) {
        k = tr->input(0);
        k_transposed = 0;
        nodes.push_back(tr);
      }
    }
    // Q, K, V need equal ranks >= 2 for the fused op; the mask must be float of the same type.
    auto rank = [](const ir::Value* x) { return x->type.has_rank() ? static_cast<int64_t>(x->type.dims->size()) : -1; };
    if (rank(q) < 2 || rank(q) != rank(k) || rank(q) != rank(v)) continue;
    if (!IsFusableFloat(q->type.dtype) || k->type.dtype != q->type.dtype || v->type.dtype != q->type.dtype) continue;
    if (mask && (mask->type.dtype != q->type.dtype || !mask->type.has_rank() || rank(mask) > rank(q))) continue;
    std::map<std::string, ir::Attribute> attrs;
    attrs["scale"] = ir::Attribute::Float(static_cast<float>(scale));
    attrs["k_transposed"] = ir::Attribute::Int(k_transposed);
    std::vector<ir::Value*> inputs = {q, k, v};
    if (mask) inputs.push_back(mask);
    ir::Value* out = out_mm->output(0);
    std::string name = sm->name + "_attention";
    SP_ASSIGN_OR_RETURN(ir::Node * fused, ReplaceWithFused(graph, nodes, "sampan", "Attention", name, inputs, attrs, out));
    ctx.Record(StrCat("fused attention (", nodes.size(), " nodes, scale ", scale, mask ? ", masked" : "", ") into ",
                      fused->Label()));
    return true;
  }
  return false;
}

Result<bool> FuseAttention(ir::Graph& graph, PassContext& ctx) { return RewriteToFixpoint(graph, ctx, MatchOne); }

}  // namespace

SAMPAN_REGISTER_PASS("fuse_attention", 470, FuseAttention);

}  // namespace sampan::passes
