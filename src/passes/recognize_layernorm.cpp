// Recognises LayerNormalization written out in primitive ops (as exporters emit
// it for opsets before 17):
//   m = ReduceMean(x, axes)       d = Sub(x, m)
//   v = ReduceMean(Pow(d, 2) | Mul(d, d), axes)
//   n = Div(d, Sqrt(Add(v, eps)))
//   y = Add(Mul(n, gamma), beta)  (Mul and Add optional)
// -> y = LayerNormalization(x, gamma, beta) {axis, epsilon}
#include <cmath>

#include "passes/fusion_util.h"

namespace sampan::passes {
namespace {

ir::Node* ProducerOf(const ir::Value* v, const char* op) {
  if (v == nullptr || v->producer() == nullptr) return nullptr;
  ir::Node* p = v->producer();
  return p->op_type == op && p->domain.empty() ? p : nullptr;
}

// Reduction axes of a ReduceMean (attribute or, from opset 18, input 1), normalised; empty if unknown.
std::vector<int64_t> MeanAxes(const ir::Node* n, int64_t rank) {
  std::vector<int64_t> axes;
  if (n->has_attr("axes"))
    axes = n->attr_ints("axes");
  else if (n->input(1) && n->input(1)->is_constant()) {
    for (int64_t i = 0; i < n->input(1)->data.numel(); ++i) axes.push_back(ElementAsInt64(n->input(1)->data, i));
  }
  if (n->attr_int("keepdims", 1) != 1) return {};
  for (auto& a : axes) a = a < 0 ? a + rank : a;
  std::sort(axes.begin(), axes.end());
  return axes;
}

Result<bool> MatchOne(ir::Graph& graph, PassContext& ctx) {
  for (const auto& up : graph.nodes()) {
    ir::Node* div = up.get();
    if (div->op_type != "Div" || !div->domain.empty()) continue;
    ir::Value* d = div->input(0);
    ir::Node* sub = ProducerOf(d, "Sub");
    ir::Node* sqrt = ProducerOf(div->input(1), "Sqrt");
    if (!sub || !sqrt) continue;
    ir::Value* x = sub->input(0);
    ir::Node* mean1 = ProducerOf(sub->input(1), "ReduceMean");
    if (!mean1 || mean1->input(0) != x || !x->type.has_rank()) continue;
    const int64_t rank = static_cast<int64_t>(x->type.dims->size());
    std::vector<int64_t> axes = MeanAxes(mean1, rank);
    // LayerNormalization normalises trailing axes [axis, rank).
    if (axes.empty() || axes.back() != rank - 1) continue;
    bool trailing = true;
    for (size_t i = 1; i < axes.size(); ++i) trailing &= axes[i] == axes[i - 1] + 1;
    if (!trailing) continue;
    ir::Node* add_eps = ProducerOf(sqrt->input(0), "Add");
    if (!add_eps) continue;
    ir::Node* mean2 = ProducerOf(add_eps->input(0), "ReduceMean");
    ir::Value* eps_v = add_eps->input(1);
    if (!mean2) {
      mean2 = ProducerOf(add_eps->input(1), "ReduceMean");
      eps_v = add_eps->input(0);
    }
    auto eps = ScalarConst(eps_v);
    if (!mean2 || !eps || MeanAxes(mean2, rank) != axes) continue;
    ir::Node* sq = mean2->input(0) ? mean2->input(0)->producer() : nullptr;
    if (!sq || !sq->domain.empty()) continue;
    bool is_square = false;
    if (sq->op_type == "Pow" && sq->input(0) == d) is_square = ScalarConst(sq->input(1)) == 2.0;
    if (sq->op_type == "Mul" && sq->input(0) == d && sq->input(1) == d) is_square = true;
    if (!is_square) continue;
    // Every intermediate must be private to the pattern.
    if (d->uses().size() != 2 || IsGraphOutput(graph, d)) continue;
    if (!HasSingleUse(graph, mean1->output(0)) || !HasSingleUse(graph, sq->output(0)) ||
        !HasSingleUse(graph, mean2->output(0)) || !HasSingleUse(graph, add_eps->output(0)) ||
        !HasSingleUse(graph, sqrt->output(0)))
      continue;
    std::vector<ir::Node*> nodes = {mean1, sub, sq, mean2, add_eps, sqrt, div};
    ir::Value* y = div->output(0);
    // Optional affine part with constants of the normalised shape.
    ir::Value* gamma = nullptr;
    ir::Value* beta = nullptr;
    int64_t norm_elems = 1;
    bool static_tail = true;
    for (int64_t a : axes) {
      const ir::Dim& dim = (*x->type.dims)[static_cast<size_t>(a)];
      static_tail &= dim.known();
      norm_elems *= dim.known() ? dim.value : 1;
    }
    if (!static_tail) continue;
    auto affine_const = [&](const ir::Value* c) {
      return c && c->is_constant() && c->data.numel() == norm_elems && c->data.dtype() == x->type.dtype;
    };
    if (HasSingleUse(graph, y)) {
      ir::Node* mul = y->uses()[0].first;
      if (mul->op_type == "Mul" && mul->domain.empty() && affine_const(Other(mul, y))) {
        gamma = Other(mul, y);
        nodes.push_back(mul);
        y = mul->output(0);
        if (HasSingleUse(graph, y)) {
          ir::Node* add = y->uses()[0].first;
          if (add->op_type == "Add" && add->domain.empty() && affine_const(Other(add, y))) {
            beta = Other(add, y);
            nodes.push_back(add);
            y = add->output(0);
          }
        }
      }
    }
    Shape norm_shape;
    for (int64_t a : axes) norm_shape.push_back((*x->type.dims)[static_cast<size_t>(a)].value);
    auto as_param = [&](ir::Value* c, float fill, const char* suffix) -> Result<ir::Value*> {
      Tensor t;
      if (c) {
        t = c->data.Reshaped(norm_shape);
      } else {
        SP_ASSIGN_OR_RETURN(Tensor f32, Tensor::Zeros(DType::kFloat32, norm_shape));
        for (int64_t i = 0; i < f32.numel(); ++i) f32.mutable_data<float>()[i] = fill;
        SP_ASSIGN_OR_RETURN(t, CastTensor(f32, x->type.dtype));
      }
      return graph.AddConstant(graph.FreshName(div->name + suffix), t);
    };
    SP_ASSIGN_OR_RETURN(ir::Value * g, as_param(gamma, 1.f, "_ln_scale"));
    SP_ASSIGN_OR_RETURN(ir::Value * b, as_param(beta, 0.f, "_ln_bias"));
    std::map<std::string, ir::Attribute> attrs;
    attrs["axis"] = ir::Attribute::Int(axes.front() - rank);
    attrs["epsilon"] = ir::Attribute::Float(static_cast<float>(*eps));
    std::string name = div->name + "_layernorm";
    std::string from = div->Label();
    SP_RETURN_IF_ERROR(ReplaceWithFused(graph, nodes, "", "LayerNormalization", name, {x, g, b}, attrs, y).status());
    ctx.Record(StrCat("recognised LayerNormalization from ", nodes.size(), " nodes ending at ", from));
    return true;
  }
  return false;
}

Result<bool> RecognizeLayerNorm(ir::Graph& graph, PassContext& ctx) {
  return RewriteToFixpoint(graph, ctx, MatchOne);
}

}  // namespace

SAMPAN_REGISTER_PASS("recognize_layernorm", RecognizeLayerNorm);

}  // namespace sampan::passes
