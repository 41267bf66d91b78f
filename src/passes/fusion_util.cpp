#include "passes/fusion_util.h"

#include <cfloat>

#include "ops/run_node.h"

namespace sampan::passes {

bool IsFusableFloat(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}

int64_t ConvOutputChannels(const ir::Node& conv, const Tensor& w) {
  if (!conv.domain.empty() || w.rank() < 3) return 0;
  if (conv.op_type == "Conv") return w.dim(0);
  if (conv.op_type != "ConvTranspose") return 0;
  const int64_t group = conv.attr_int("group", 1);
  if (group < 1 || w.dim(0) % group != 0) return 0;
  return w.dim(1) * group;
}

void ScaleConvOutputChannels(const ir::Node& conv, Tensor* w64, const std::vector<double>& f) {
  double* pw = w64->mutable_data<double>();
  const int64_t channels = static_cast<int64_t>(f.size());
  if (conv.op_type == "Conv") {  // [M, C/g, k...]: channel c's weights are one contiguous run
    const int64_t per = w64->numel() / channels;
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < per; ++i) pw[c * per + i] *= f[static_cast<size_t>(c)];
    return;
  }
  // ConvTranspose [C, M/g, k...]: input channel i is in group i / (C/g); its row j feeds output
  // channel group * (M/g) + j.
  const int64_t in_channels = w64->dim(0), per_group_out = w64->dim(1);
  const int64_t group = channels / per_group_out, in_per_group = in_channels / group;
  const int64_t k = w64->numel() / (in_channels * per_group_out);
  for (int64_t i = 0; i < in_channels; ++i)
    for (int64_t j = 0; j < per_group_out; ++j) {
      const double s = f[static_cast<size_t>((i / in_per_group) * per_group_out + j)];
      double* run = pw + (i * per_group_out + j) * k;
      for (int64_t e = 0; e < k; ++e) run[e] *= s;
    }
}

std::optional<double> ScalarConst(const ir::Value* v) {
  if (v == nullptr || !v->is_constant() || v->data.numel() != 1 || !IsFloatDType(v->data.dtype())) return std::nullopt;
  return ElementAsDouble(v->data, 0);
}

Status FinishRewrite(ir::Graph& graph) {
  graph.RemoveUnusedValues();
  SP_RETURN_IF_ERROR(graph.TopologicalSort());
  SP_RETURN_IF_ERROR(ir::Verify(graph));
  return ops::InferTypes(graph);
}

Result<bool> RewriteToFixpoint(ir::Graph& graph, PassContext& ctx,
                               Result<bool> (*match_one)(ir::Graph&, PassContext&)) {
  bool changed = false;
  for (;;) {
    SP_ASSIGN_OR_RETURN(bool one, match_one(graph, ctx));
    if (!one) return changed;
    changed = true;
  }
}

namespace {
// Scalar float value of a constant input, or `dflt` when absent; nullopt if not constant.
std::optional<float> ConstScalar(const ir::Value* v, float dflt) {
  if (v == nullptr) return dflt;
  if (!v->is_constant() || v->data.numel() != 1) return std::nullopt;
  return static_cast<float>(ElementAsDouble(v->data, 0));
}
}  // namespace

std::optional<ActivationMatch> MatchActivation(const ir::Graph& graph, ir::Value* v) {
  if (IsGraphOutput(graph, v)) return std::nullopt;
  const auto& uses = v->uses();
  if (uses.size() == 2) {  // SiLU: Mul(v, Sigmoid(v))
    ir::Node* a = uses[0].first;
    ir::Node* b = uses[1].first;
    ir::Node* sig = a->op_type == "Sigmoid" ? a : (b->op_type == "Sigmoid" ? b : nullptr);
    ir::Node* mul = sig == a ? b : a;
    if (sig == nullptr || mul->op_type != "Mul" || !sig->domain.empty() || !mul->domain.empty()) return std::nullopt;
    ir::Value* s = sig->output(0);
    if (!HasSingleUse(graph, s) || s->uses()[0].first != mul) return std::nullopt;
    if (!((mul->input(0) == v && mul->input(1) == s) || (mul->input(0) == s && mul->input(1) == v)))
      return std::nullopt;
    return ActivationMatch{{ops::Activation::kSiLU}, {sig, mul}, mul->output(0)};
  }
  if (uses.size() != 1) return std::nullopt;
  ir::Node* n = uses[0].first;
  if (!n->domain.empty() || n->input(0) != v || n->num_outputs() != 1) return std::nullopt;
  // The ONNX op's attributes (ONNX's defaults where absent) become the activation's parameters.
  using ops::Activation;
  ActivationMatch m{{}, {n}, n->output(0)};
  const std::string& op = n->op_type;
  if (op == "Relu") {
    m.act = {Activation::kRelu};
  } else if (op == "Sigmoid") {
    m.act = {Activation::kSigmoid};
  } else if (op == "Tanh") {
    m.act = {Activation::kTanh};
  } else if (op == "HardSwish") {
    m.act = {Activation::kHardSwish};
  } else if (op == "LeakyRelu") {
    m.act = {Activation::kLeakyRelu, n->attr_float("alpha", 0.01f)};
  } else if (op == "HardSigmoid") {
    m.act = {Activation::kHardSigmoid, n->attr_float("alpha", 0.2f), n->attr_float("beta", 0.5f)};
  } else if (op == "Gelu") {
    std::string approx = n->attr_string("approximate", "none");
    if (approx != "none" && approx != "tanh") return std::nullopt;
    m.act = {approx == "tanh" ? Activation::kGeluTanh : Activation::kGelu};
  } else if (op == "Clip") {
    float lo, hi;
    if (n->has_attr("min") || n->has_attr("max") || n->num_inputs() == 1) {
      lo = n->attr_float("min", -FLT_MAX);
      hi = n->attr_float("max", FLT_MAX);
    } else {
      auto a = ConstScalar(n->input(1), -FLT_MAX);
      auto b = ConstScalar(n->input(2), FLT_MAX);
      if (!a || !b) return std::nullopt;
      lo = *a;
      hi = *b;
    }
    m.act = {Activation::kClip, lo, hi};
  } else {
    return std::nullopt;
  }
  return m;
}

Result<ir::Node*> ReplaceWithFused(ir::Graph& graph, const std::vector<ir::Node*>& old_nodes, const std::string& domain,
                                   const std::string& op_type, const std::string& name,
                                   const std::vector<ir::Value*>& inputs,
                                   const std::map<std::string, ir::Attribute>& attrs, ir::Value* output) {
  return ReplaceWithFused(graph, old_nodes, domain, op_type, name, inputs, attrs, std::vector<ir::Value*>{output});
}

Result<ir::Node*> ReplaceWithFused(ir::Graph& graph, const std::vector<ir::Node*>& old_nodes, const std::string& domain,
                                   const std::string& op_type, const std::string& name,
                                   const std::vector<ir::Value*>& inputs,
                                   const std::map<std::string, ir::Attribute>& attrs,
                                   const std::vector<ir::Value*>& outputs) {
  // Copy everything first: callers may pass fields of the nodes about to be removed (e.g. mm->name).
  const std::string new_domain = domain, new_op = op_type, new_name = name;
  const std::vector<ir::Value*> new_inputs = inputs, new_outputs = outputs;
  const std::map<std::string, ir::Attribute> new_attrs = attrs;
  for (ir::Node* n : old_nodes) graph.RemoveNode(n);
  SP_ASSIGN_OR_RETURN(ir::Node * node, graph.AddNode(new_op, new_inputs, new_outputs, new_name));
  node->domain = new_domain;
  node->attrs = new_attrs;
  if (!new_domain.empty()) graph.opsets.emplace(new_domain, 1);
  return node;
}

bool SameShape(const ir::TensorType& a, const ir::TensorType& b) {
  if (!a.dims || !b.dims || a.dims->size() != b.dims->size()) return false;
  for (size_t i = 0; i < a.dims->size(); ++i) {
    const ir::Dim& x = (*a.dims)[i];
    const ir::Dim& y = (*b.dims)[i];
    if (x.known() != y.known()) return false;
    if (x.known() ? x.value != y.value : (x.param.empty() || x.param != y.param)) return false;
  }
  return true;
}

}  // namespace sampan::passes
