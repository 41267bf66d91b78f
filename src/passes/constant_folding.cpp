// Evaluates nodes whose inputs are all constants, and nodes whose outputs are
// decided by static shapes alone (Shape, Size of a static tensor), replacing
// them with constants. Shape -> Gather -> Concat -> Reshape chains of a model
// with static shapes collapse to a constant shape this way. A DequantizeLinear of constant
// weights read by a Conv, MatMul or Gemm is left for fuse_quantized.
#include "ops/fold_limits.h"
#include "ops/op.h"
#include "ops/run_node.h"
#include "passes/pass.h"

namespace sampan::passes {
namespace {

// A quantized weight's DequantizeLinear stays for fuse_quantized, which makes its reader an
// integer product (QConv, QMatMul) and folds the weights it does not take.
bool KeepsQuantizedWeight(const ir::Node& node) {
  if (!node.domain.empty() || node.op_type != "DequantizeLinear" || node.num_outputs() != 1) return false;
  const ir::Value* y = node.output(0);
  if (y == nullptr || y->uses().empty()) return false;
  for (const auto& [user, index] : y->uses()) {
    const bool product =
        (user->domain.empty() && (user->op_type == "Conv" || user->op_type == "MatMul" || user->op_type == "Gemm")) ||
        (user->domain == "sampan" &&
         (user->op_type == "FusedConv" || user->op_type == "FusedMatMul" || user->op_type == "FusedGemm"));
    if (!product || index != 1) return false;
  }
  return true;
}

Result<bool> FoldConstants(ir::Graph& graph, PassContext& ctx) {
  bool changed = false;
  const int64_t opset = graph.opset();
  std::vector<ir::Node*> nodes;
  for (const auto& n : graph.nodes()) nodes.push_back(n.get());
  for (ir::Node* node : nodes) {
    // A random draw folded would be the same draw on every run.
    if (ops::IsNondeterministic(*node) || node->num_outputs() == 0) continue;
    if (KeepsQuantizedWeight(*node)) continue;
    const ops::OpDef* def = ops::FindOp(node->domain, node->op_type);
    if (def == nullptr) continue;
    bool all_constant = true;
    std::vector<ops::InferInput> infer_inputs(node->num_inputs());
    std::vector<const Tensor*> args(node->num_inputs(), nullptr);
    for (size_t i = 0; i < node->num_inputs(); ++i) {
      const ir::Value* in = node->input(i);
      if (in == nullptr) continue;
      infer_inputs[i] = ops::InferInput{true, in->type.dtype, in->type.dims, in->is_constant() ? &in->data : nullptr};
      if (in->is_constant())
        args[i] = &in->data;
      else
        all_constant = false;
    }
    std::vector<Tensor> values;
    if (all_constant) {
      // Outputs larger than folding keeps are not computed at all (a declared dim may be huge).
      ops::InferContext sizes(*node, opset, infer_inputs);
      bool too_big = false;
      if (ops::RunInfer(*def, sizes).ok()) {
        int64_t planned = 0;
        for (size_t i = 0; i < node->num_outputs() && !too_big; ++i) {
          const ir::TensorType& t = sizes.output(i);
          if (!t.is_static()) continue;
          too_big = !CheckShape(t.static_shape(), ops::kMaxBuildFoldElements).ok();
          if (!too_big) planned += NumElements(t.static_shape());
        }
        too_big |= planned > ops::kMaxBuildFoldElements;
      }
      if (too_big) continue;
      Status st = ops::RunNode(*node, opset, args, &values);
      if (!st.ok()) return st.WithContext("constant folding");
    } else {
      // Outputs decided by static input shapes (e.g. Shape).
      ops::InferContext ictx(*node, opset, std::move(infer_inputs));
      if (!ops::RunInfer(*def, ictx).ok()) continue;
      bool all_known = true;
      for (size_t i = 0; i < node->num_outputs(); ++i)
        if (node->output(i) && !ictx.output_value(i)) all_known = false;
      if (!all_known) continue;
      for (size_t i = 0; i < node->num_outputs(); ++i)
        values.push_back(ictx.output_value(i) ? *ictx.output_value(i) : Tensor());
    }
    int64_t total = 0;
    for (const Tensor& v : values) total += v.defined() ? v.numel() : 0;
    if (total > ops::kMaxBuildFoldElements) continue;
    ctx.Record(StrCat("folded ", node->Label(), " into a constant"));
    SP_RETURN_IF_ERROR(ReplaceWithConstants(graph, node, values));
    changed = true;
  }
  return changed;
}

}  // namespace

SAMPAN_REGISTER_PASS("constant_folding", FoldConstants);

}  // namespace sampan::passes
