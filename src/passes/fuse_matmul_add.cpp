// MatMul(A, W) + bias, W a constant [K, N] and bias a constant of N elements:
// one Gemm when A is 2-D, else one sampan::FusedMatMul (N-D A, bias epilogue).
#include "passes/fusion_util.h"

namespace sampan::passes {
namespace {

// One rewrite; false when nothing matched.
Result<bool> FuseOne(ir::Graph& graph, PassContext& ctx) {
  for (const auto& up : graph.nodes()) {
    ir::Node* mm = up.get();
    if (mm->op_type != "MatMul" || !mm->domain.empty()) continue;
    ir::Value* a = mm->input(0);
    ir::Value* w = mm->input(1);
    ir::Value* y = mm->output(0);
    if (!w->is_constant() || w->data.rank() != 2 || !IsFusableFloat(w->data.dtype())) continue;
    if (!HasSingleUse(graph, y)) continue;
    ir::Node* add = y->uses()[0].first;
    if (add->op_type != "Add" || !add->domain.empty()) continue;
    ir::Value* bias = add->input(0) == y ? add->input(1) : add->input(0);
    const int64_t n = w->data.dim(1);
    if (bias == nullptr || !bias->is_constant() || bias->data.numel() != n || bias->data.dtype() != w->data.dtype())
      continue;
    bool bias_last_axis = bias->data.rank() >= 1 && bias->data.shape().back() == n;
    if (!bias_last_axis || !a->type.has_rank()) continue;
    // The Add must not broadcast the result to a larger rank.
    if (bias->data.rank() > static_cast<int64_t>(a->type.dims->size())) continue;
    SP_ASSIGN_OR_RETURN(ir::Value * bias1d,
                        graph.AddConstant(graph.FreshName(bias->name() + "_1d"), bias->data.Reshaped({n})));
    const bool two_d = a->type.dims->size() == 2;
    ir::Value* out = add->output(0);
    std::string label = mm->Label();
    std::string add_label = add->Label();
    SP_RETURN_IF_ERROR(ReplaceWithFused(graph, {mm, add}, two_d ? "" : "sampan", two_d ? "Gemm" : "FusedMatMul",
                                        mm->name, {a, w, bias1d}, {}, out)
                           .status());
    ctx.Record(StrCat("fused ", label, " + ", add_label, " into ", two_d ? "Gemm" : "FusedMatMul", " with bias"));
    return true;
  }
  return false;
}

Result<bool> FuseMatMulAdd(ir::Graph& graph, PassContext& ctx) {
  return RewriteToFixpoint(graph, ctx, FuseOne);
}

}  // namespace

SAMPAN_REGISTER_PASS("fuse_matmul_add", FuseMatMulAdd);

}  // namespace sampan::passes
