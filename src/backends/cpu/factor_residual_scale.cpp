#include "backends/cpu/factor_residual_scale.h"

#include "backends/cpu/lowering_rewrite.h"
#include "passes/fusion_util.h"

namespace sampan::cpu {
namespace {

// s broadcasts into x's shape (x * s is x's shape): s has no more dims than x and each of its
// dims, right-aligned, is 1 or provably x's (the same size, or the same named symbol).
bool BroadcastsInto(const ir::TensorType& s, const ir::TensorType& x) {
  if (!s.dims || !x.dims || s.dims->size() > x.dims->size()) return false;
  const size_t off = x.dims->size() - s.dims->size();
  for (size_t i = 0; i < s.dims->size(); ++i) {
    const ir::Dim& a = (*s.dims)[i];
    const ir::Dim& b = (*x.dims)[off + i];
    if (a.known() && a.value == 1) continue;
    if (a.known() ? a.value != b.value : (a.param.empty() || a.param != b.param)) return false;
  }
  return true;
}

// The rewrite at `add` when it matches; false (graph untouched) otherwise.
Result<bool> FactorAt(ir::Graph& g, ir::Node* add, std::string* line) {
  if (!passes::Is(add, "Add") || add->num_inputs() != 2 || add->num_outputs() != 1) return false;
  ir::Value* y = add->output(0);
  if (y->type.dtype != DType::kFloat32) return false;
  for (int side = 0; side < 2; ++side) {
    ir::Value* x = add->input(static_cast<size_t>(side));
    ir::Value* m = add->input(static_cast<size_t>(1 - side));
    ir::Node* mul = m ? m->producer() : nullptr;
    if (!passes::Is(mul, "Mul") || mul->num_inputs() != 2 || passes::SoleUser(g, m) != add) continue;
    if (mul->input(0) != x && mul->input(1) != x) continue;
    ir::Value* s = passes::Other(mul, x);
    if (s == x || s == nullptr || s->type.dtype != DType::kFloat32) continue;
    // The product and the sum must be x's shape.
    if (!BroadcastsInto(s->type, x->type)) continue;
    ir::Value* one_plus_s = nullptr;
    if (s->is_constant()) {
      Tensor t = s->data.Clone();
      float* p = t.mutable_data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] += 1.f;
      SP_ASSIGN_OR_RETURN(one_plus_s, g.AddConstant(g.FreshName(s->name() + "_plus_one"), std::move(t)));
    } else {
      Tensor one = Tensor::Alloc(DType::kFloat32, {});
      one.mutable_data<float>()[0] = 1.f;
      SP_ASSIGN_OR_RETURN(ir::Value * c, g.AddConstant(g.FreshName("one"), std::move(one)));
      SP_ASSIGN_OR_RETURN(one_plus_s, g.AddValue(g.FreshName(s->name() + "_plus_one"), s->type));
      SP_RETURN_IF_ERROR(g.AddNode("Add", {s, c}, {one_plus_s}, g.FreshName(mul->name + "_one_plus")).status());
    }
    *line = StrCat(add->name, " <- ", x->name(), " * (1 + ", s->name(), ") of ", mul->name);
    const std::string name = add->name;
    SP_RETURN_IF_ERROR(passes::ReplaceWithFused(g, {add, mul}, "", "Mul", name, {x, one_plus_s}, {}, y).status());
    return true;
  }
  return false;
}

}  // namespace

Result<std::vector<std::string>> FactorResidualScale(plan::Plan& plan) {
  return RewriteUntilNoneMatches(plan, FactorAt);
}

}  // namespace sampan::cpu
