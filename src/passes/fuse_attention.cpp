// Recognises scaled dot-product attention:
//   s = MatMul(Q [* cq], (Transpose(K, swap last two) | Kt) [* ck])
//     | Einsum("...id,...jd->...ij", Q [* cq], K [* ck])   (MaxViT's export)
//   s = Div(s, c) | Mul(s, c)            (optional)
//   s = Add(s, mask)                     (optional, additive mask)
//   p = Softmax(s, axis = last)
//   p = Where(IsNaN(p), 0, p)            (optional NaN guard)
//   o = MatMul(p, V) | Einsum("...ij,...jd->...id", p, V)
// -> o = sampan::Attention(Q, K|Kt, V, mask) {scale = cq * ck / c, k_transposed}
// The scalar factors on Q and K and the NaN guard are how torch's ONNX export of
// scaled_dot_product_attention with a boolean mask looks (mask = Where(b, 0, -inf)).
// sampan::Attention gives zeros for rows whose softmax is undefined (all -inf or a
// NaN), which is exactly what the guard does, so the fusion is exact with it.
#include <optional>
#include <utility>

#include "passes/fusion_util.h"

namespace sampan::passes {
namespace {

// The two products of attention written as Einsum: batch labels L (the same on every
// operand), then QK^T = "L i d, L j d -> L i j" or PV = "L i j, L j d -> L i d" with i, j,
// d three other distinct labels. Spaces are allowed (torch writes "B G H I D, ...").
enum class EinsumForm { kNone, kQK, kPV };
EinsumForm EinsumAttentionForm(const ir::Node* n) {
  if (!Is(n, "Einsum") || n->num_inputs() != 2) return EinsumForm::kNone;
  std::string eq;
  for (char c : n->attr_string("equation", ""))
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->"), comma = eq.find(',');
  if (arrow == std::string::npos || comma == std::string::npos || comma > arrow) return EinsumForm::kNone;
  const std::string a = eq.substr(0, comma), b = eq.substr(comma + 1, arrow - comma - 1), o = eq.substr(arrow + 2);
  if (a.size() < 2 || a.size() != b.size() || a.size() != o.size() || a.find('.') != std::string::npos)
    return EinsumForm::kNone;
  const size_t r = a.size();
  const std::string lead = a.substr(0, r - 2);
  if (b.substr(0, r - 2) != lead || o.substr(0, r - 2) != lead) return EinsumForm::kNone;
  for (size_t i = 0; i < lead.size(); ++i)
    if (lead.find(lead[i]) != i) return EinsumForm::kNone;  // repeated batch labels: a diagonal
  const char a1 = a[r - 2], a2 = a[r - 1], b1 = b[r - 2], b2 = b[r - 1], o1 = o[r - 2], o2 = o[r - 1];
  auto fresh = [&](char c) { return lead.find(c) == std::string::npos; };
  if (!fresh(a1) || !fresh(a2) || !fresh(b1) || !fresh(b2) || a1 == a2 || b1 == b2) return EinsumForm::kNone;
  if (a2 == b2 && a1 != b1 && o1 == a1 && o2 == b1) return EinsumForm::kQK;  // i d, j d -> i j
  if (a2 == b1 && a1 != b2 && o1 == a1 && o2 == b2) return EinsumForm::kPV;  // i j, j d -> i d
  return EinsumForm::kNone;
}

bool SoftmaxOnLastAxis(const ir::Node* sm, int64_t opset) {
  const ir::Value* x = sm->input(0);
  if (!x->type.has_rank()) return false;
  const int64_t rank = static_cast<int64_t>(x->type.dims->size());
  int64_t axis = sm->attr_int("axis", opset >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  return axis == rank - 1;
}

// p = Softmax output feeding exactly Where(IsNaN(p), 0, p): returns {IsNaN, Where}.
std::optional<std::pair<ir::Node*, ir::Node*>> MatchNanGuard(const ir::Graph& graph, ir::Value* p) {
  if (p->uses().size() != 2 || IsGraphOutput(graph, p)) return std::nullopt;
  ir::Node* isnan = nullptr;
  ir::Node* where = nullptr;
  for (const auto& [user, slot] : p->uses()) {
    if (Is(user, "IsNaN"))
      isnan = user;
    else if (Is(user, "Where") && slot == 2)
      where = user;
  }
  if (!isnan || !where || where->input(0) != isnan->output(0) || where->input(2) != p) return std::nullopt;
  if (!HasSingleUse(graph, isnan->output(0))) return std::nullopt;
  const auto zero = ScalarConst(where->input(1));
  if (!zero || *zero != 0.0) return std::nullopt;
  // Broadcasting the scalar must leave p's type as it is.
  if (!where->output(0)->type.has_rank() || !p->type.has_rank() ||
      where->output(0)->type.dims->size() != p->type.dims->size() || where->output(0)->type.dtype != p->type.dtype)
    return std::nullopt;
  return std::make_pair(isnan, where);
}

// x = Mul(y, c) or Mul(c, y) with a scalar constant c and x used once: returns {y, c, Mul}.
struct ScaledOperand {
  ir::Value* base;
  double factor;
  ir::Node* mul;
};
std::optional<ScaledOperand> MatchScalarMul(const ir::Graph& graph, ir::Value* x) {
  ir::Node* m = x->producer();
  if (!Is(m, "Mul") || !HasSingleUse(graph, x)) return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    auto c = ScalarConst(m->input(static_cast<size_t>(i)));
    ir::Value* base = m->input(static_cast<size_t>(1 - i));
    if (!c || base->is_constant()) continue;
    // The product must have the operand's own rank (a scalar does not add dims).
    if (!base->type.has_rank() || !x->type.has_rank() || base->type.dims->size() != x->type.dims->size()) continue;
    return ScaledOperand{base, *c, m};
  }
  return std::nullopt;
}

Result<bool> MatchOne(ir::Graph& graph, PassContext& ctx) {
  for (const auto& up : graph.nodes()) {
    ir::Node* sm = up.get();
    if (!Is(sm, "Softmax") || !SoftmaxOnLastAxis(sm, graph.opset())) continue;
    std::vector<ir::Node*> nodes = {sm};
    ir::Value* probs = sm->output(0);
    bool guarded = false;
    if (auto guard = MatchNanGuard(graph, probs)) {
      nodes.push_back(guard->first);
      nodes.push_back(guard->second);
      probs = guard->second->output(0);
      guarded = true;
    }
    ir::Node* out_mm = SoleUser(graph, probs);
    if (!(Is(out_mm, "MatMul") || EinsumAttentionForm(out_mm) == EinsumForm::kPV) || out_mm->input(0) != probs)
      continue;
    nodes.push_back(out_mm);
    ir::Value* v = out_mm->input(1);
    ir::Value* s = sm->input(0);
    ir::Value* mask = nullptr;
    double scale = 1.0;
    ir::Node* n = s->producer();
    if (Is(n, "Add") && HasSingleUse(graph, s)) {
      // The mask is the operand that is not the score chain.
      ir::Node* a = n->input(0)->producer();
      const bool first_is_scores = a && (Is(a, "MatMul") || Is(a, "Einsum") || Is(a, "Div") || Is(a, "Mul"));
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
    const bool einsum = EinsumAttentionForm(n) == EinsumForm::kQK;
    if (!(Is(n, "MatMul") || einsum) || !HasSingleUse(graph, s)) continue;
    nodes.push_back(n);
    ir::Value* q = n->input(0);
    ir::Value* k = n->input(1);
    // Scalar factors on Q and on (transposed) K fold into the scale.
    for (ir::Value** operand : {&q, &k}) {
      if (auto m = MatchScalarMul(graph, *operand)) {
        scale *= m->factor;
        *operand = m->base;
        nodes.push_back(m->mul);
      }
    }
    // MatMul's second operand is K^T as given; the Einsum form reads K as [.., Sk, D].
    int64_t k_transposed = einsum ? 0 : 1;
    ir::Node* tr = k->producer();
    if (!einsum && Is(tr, "Transpose") && HasSingleUse(graph, k) && tr->input(0)->type.has_rank()) {
      const auto perm = tr->attr_ints("perm");
      const size_t r = tr->input(0)->type.dims->size();
      bool swap_last = perm.size() == r && r >= 2;
      for (size_t i = 0; swap_last && i < r; ++i) {
        const int64_t want = i == r - 2   ? static_cast<int64_t>(r - 1)
                             : i == r - 1 ? static_cast<int64_t>(r - 2)
                                          : static_cast<int64_t>(i);
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
    SP_ASSIGN_OR_RETURN(ir::Node * fused,
                        ReplaceWithFused(graph, nodes, "sampan", "Attention", name, inputs, attrs, out));
    ctx.Record(StrCat("fused attention (", nodes.size(), " nodes, scale ", scale, mask ? ", masked" : "",
                      guarded ? ", NaN guard" : "", ") into ", fused->Label()));
    return true;
  }
  return false;
}

Result<bool> FuseAttention(ir::Graph& graph, PassContext& ctx) {
  return RewriteToFixpoint(graph, ctx, MatchOne);
}

}  // namespace

SAMPAN_REGISTER_PASS("fuse_attention", FuseAttention);

}  // namespace sampan::passes
