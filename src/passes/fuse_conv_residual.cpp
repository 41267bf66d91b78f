// Add(Conv(x), r) -> sampan::FusedConv(x, W, B, Z=r): the residual add runs in
// the convolution's epilogue. A later Relu fuses on top (fuse_activation).
#include "passes/fusion_util.h"

namespace sampan::passes {
namespace {

bool IsPlainConv(const ir::Node* n) {
  if (n == nullptr) return false;
  if (n->op_type == "Conv" && n->domain.empty()) return true;
  return n->op_type == "FusedConv" && n->domain == "sampan" && n->input(3) == nullptr &&
         n->attr_string("activation", "").empty();
}

Result<bool> FuseOne(ir::Graph& graph, PassContext& ctx) {
  for (const auto& up : graph.nodes()) {
    ir::Node* add = up.get();
    if (add->op_type != "Add" || !add->domain.empty() || add->num_inputs() != 2) continue;
    ir::Value* out = add->output(0);
    // Shapes must match exactly (no broadcasting); a symbolic batch ("N") is fine.
    if (!out->type.has_rank() || !IsFusableFloat(out->type.dtype)) continue;
    for (int side = 1; side >= 0; --side) {  // prefer the later operand's conv
      ir::Value* c = add->input(static_cast<size_t>(side));
      ir::Value* r = add->input(static_cast<size_t>(1 - side));
      if (!IsPlainConv(c->producer()) || !HasSingleUse(graph, c)) continue;
      if (!SameShape(c->type, out->type) || !SameShape(r->type, out->type)) continue;
      ir::Node* conv = c->producer();
      std::vector<ir::Value*> inputs = {conv->input(0), conv->input(1), conv->input(2), r};
      std::string label = conv->Label(), add_label = add->Label();
      auto attrs = conv->attrs;
      std::string name = conv->name;
      SP_RETURN_IF_ERROR(
          ReplaceWithFused(graph, {conv, add}, "sampan", "FusedConv", name, inputs, attrs, out).status());
      ctx.Record(StrCat("fused residual ", add_label, " into ", label));
      return true;
    }
  }
  return false;
}

Result<bool> FuseConvResidual(ir::Graph& graph, PassContext& ctx) {
  return RewriteToFixpoint(graph, ctx, FuseOne);
}

}  // namespace

SAMPAN_REGISTER_PASS("fuse_conv_residual", FuseConvResidual);

}  // namespace sampan::passes
