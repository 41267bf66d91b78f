// Removes nodes that pass their input through unchanged: Identity, inference
// Dropout, Cast to the same type, Reshape/Flatten/Squeeze/Unsqueeze to the same
// static shape, Transpose with the identity permutation.
#include "passes/pass.h"

namespace sampan::passes {
namespace {

// A value known before constant folding: an initializer or a Constant node's output.
const Tensor* KnownValue(const ir::Value* v) {
  if (v == nullptr) return nullptr;
  if (v->is_constant()) return &v->data;
  const ir::Node* p = v->producer();
  if (p == nullptr || !p->domain.empty() || p->op_type != "Constant") return nullptr;
  const ir::Attribute* a = p->attr("value");
  return a != nullptr && a->type == ir::AttrType::kTensor ? &a->t : nullptr;
}

bool KnownZero(const ir::Value* v) {
  const Tensor* t = KnownValue(v);
  return t != nullptr && t->numel() == 1 && ElementAsDouble(*t, 0) == 0;
}

bool IsNoop(const ir::Node& n) {
  const ir::Value* in = n.input(0);
  const ir::Value* out = n.output(0);
  if (in == nullptr || out == nullptr || !n.domain.empty()) return false;
  if (n.op_type == "Identity") return true;
  if (n.op_type == "Dropout") {
    // A mask output in use keeps the node, and so does a random one: training_mode not
    // known to be false, with a ratio not known to be 0 (torch exports eval-mode dropout
    // as training_mode=true, ratio=0).
    if (n.output(1) && !n.output(1)->uses().empty()) return false;
    const ir::Value* training = n.input(2);
    return training == nullptr || KnownZero(training) || KnownZero(n.input(1));
  }
  if (n.op_type == "Cast") return in->type.dtype != DType::kUndefined && in->type.dtype == out->type.dtype;
  if (n.op_type == "Reshape" || n.op_type == "Flatten" || n.op_type == "Squeeze" || n.op_type == "Unsqueeze")
    return in->type.is_static() && out->type.is_static() && in->type.static_shape() == out->type.static_shape();
  if (n.op_type == "Transpose") {
    const ir::Attribute* perm = n.attr("perm");
    if (perm == nullptr) return in->type.has_rank() && in->type.dims->size() <= 1;
    for (size_t i = 0; i < perm->ints.size(); ++i)
      if (perm->ints[i] != static_cast<int64_t>(i)) return false;
    return true;
  }
  return false;
}

Result<bool> EliminateNoops(ir::Graph& graph, PassContext& ctx) {
  bool changed = false;
  std::vector<ir::Node*> nodes;
  for (const auto& n : graph.nodes()) nodes.push_back(n.get());
  for (ir::Node* n : nodes) {
    if (!IsNoop(*n)) continue;
    // Another output (Dropout's mask) that is a graph output needs this node to produce it.
    bool extra_output_needed = false;
    for (size_t i = 1; i < n->num_outputs(); ++i)
      if (n->output(i) && (!n->output(i)->uses().empty() || IsGraphOutput(graph, n->output(i))))
        extra_output_needed = true;
    if (extra_output_needed) continue;
    ir::Value* in = n->input(0);
    ir::Value* out = n->output(0);
    if (!CanForward(graph, out, in)) continue;
    ctx.Record(StrCat("removed no-op ", n->Label()));
    SP_RETURN_IF_ERROR(ForwardValue(graph, out, in));
    graph.RemoveNode(n);
    changed = true;
  }
  return changed;
}

}  // namespace

SAMPAN_REGISTER_PASS("eliminate_noops", EliminateNoops);

}  // namespace sampan::passes
