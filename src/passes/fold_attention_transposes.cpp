// Folds the head split/merge transposes around sampan::Attention into the op:
//   Q = Transpose(Xq) {perm=[0,2,1,3]}      Xq, Xk, Xv: [B, S, H, D] (a Reshape of a projection)
//   K = Transpose(Xk) {perm=[0,2,1,3]}      (k_transposed=0), or {perm=[0,2,3,1]} (k_transposed=1)
//   V = Transpose(Xv) {perm=[0,2,1,3]}
//   Y = Transpose(Attention(Q, K, V, mask?)) {perm=[0,2,1,3]}
// -> Y = sampan::Attention(Xq, Xk, Xv, mask?) {layout="bshd", k_transposed=0, scale}
// The kernels then read and write [B, S, H, D] directly, so the four copies go away
// (ops/attention.h describes the layout; the mask keeps its [B, H, Sq, Sk] meaning).
// All four transposes must be there, each read only by the attention, with rank-4 inputs.
#include "ops/attention.h"
#include "passes/fusion_util.h"

namespace sampan::passes {
namespace {

// Input of the Transpose producing `v` when its perm is `perm` and `v` has no other reader.
ir::Value* TransposedFrom(const ir::Graph& graph, ir::Value* v, const std::vector<int64_t>& perm,
                          std::vector<ir::Node*>* nodes) {
  ir::Node* t = v ? v->producer() : nullptr;
  if (!Is(t, "Transpose") || !HasSingleUse(graph, v)) return nullptr;
  const ir::Value* x = t->input(0);
  if (!x->type.has_rank() || x->type.dims->size() != 4) return nullptr;
  std::vector<int64_t> p = t->attr_ints("perm");
  for (int64_t& a : p) a = a < 0 ? a + 4 : a;
  if (p != perm) return nullptr;
  nodes->push_back(t);
  return t->input(0);
}

Result<bool> MatchOne(ir::Graph& graph, PassContext& ctx) {
  static const std::vector<int64_t> kSwapSH = {0, 2, 1, 3};
  static const std::vector<int64_t> kKeyT = {0, 2, 3, 1};
  for (const auto& up : graph.nodes()) {
    ir::Node* att = up.get();
    if (att->domain != "sampan" || att->op_type != "Attention" || ops::AttentionIsBshd(*att)) continue;
    if (att->num_inputs() < 3) continue;
    const bool kt = att->attr_int("k_transposed", 0) != 0;
    std::vector<ir::Node*> nodes = {att};
    ir::Value* q = TransposedFrom(graph, att->input(0), kSwapSH, &nodes);
    ir::Value* k = TransposedFrom(graph, att->input(1), kt ? kKeyT : kSwapSH, &nodes);
    ir::Value* v = TransposedFrom(graph, att->input(2), kSwapSH, &nodes);
    if (!q || !k || !v) continue;
    ir::Node* merge = SoleUser(graph, att->output(0));
    if (!Is(merge, "Transpose") || !merge->output(0)->type.has_rank() || merge->output(0)->type.dims->size() != 4)
      continue;
    std::vector<int64_t> p = merge->attr_ints("perm");
    for (int64_t& a : p) a = a < 0 ? a + 4 : a;
    if (p != kSwapSH) continue;
    nodes.push_back(merge);
    std::map<std::string, ir::Attribute> attrs = att->attrs;
    attrs["layout"] = ir::Attribute::String(ops::kAttentionBshd);
    attrs["k_transposed"] = ir::Attribute::Int(0);
    std::vector<ir::Value*> inputs = {q, k, v};
    if (att->num_inputs() > 3 && att->input(3)) inputs.push_back(att->input(3));
    const std::string name = att->name;
    SP_ASSIGN_OR_RETURN(ir::Node * fused,
                        ReplaceWithFused(graph, nodes, "sampan", "Attention", name, inputs, attrs, merge->output(0)));
    ctx.Record(
        StrCat("folded the head transposes (", nodes.size() - 1, " nodes) into ", fused->Label(), " {layout=bshd}"));
    return true;
  }
  return false;
}

Result<bool> FoldAttentionTransposes(ir::Graph& graph, PassContext& ctx) {
  return RewriteToFixpoint(graph, ctx, MatchOne);
}

}  // namespace

SAMPAN_REGISTER_PASS("fold_attention_transposes", FoldAttentionTransposes);

}  // namespace sampan::passes
