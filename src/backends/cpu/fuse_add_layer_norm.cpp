#include "backends/cpu/fuse_add_layer_norm.h"

#include "backends/cpu/lowering_rewrite.h"
#include "passes/fusion_util.h"

namespace sampan::cpu {
namespace {

// True when `x` provably broadcasts into `y` along leading dims only, spanning at least the
// dims from `axis` on: right-aligned, x's dims before some p <= axis are 1 and from p on are
// y's (the same size, or the same named symbol). The kernel reads such an operand by rows.
bool LeadingBroadcast(const ir::TensorType& x, const ir::TensorType& y, size_t axis) {
  if (!x.dims || !y.dims || x.dims->size() > y.dims->size()) return false;
  const ir::Dims& xd = *x.dims;
  const ir::Dims& yd = *y.dims;
  const size_t off = yd.size() - xd.size();
  auto same = [](const ir::Dim& a, const ir::Dim& b) {
    return a.known() ? b.known() && a.value == b.value : !a.param.empty() && a.param == b.param;
  };
  size_t p = yd.size();
  while (p > off && same(xd[p - 1 - off], yd[p - 1])) --p;
  if (p > axis) return false;
  for (size_t i = off; i < p; ++i)
    if (!xd[i - off].known() || xd[i - off].value != 1) return false;
  return true;
}

Result<bool> FuseAt(ir::Graph& g, ir::Node* ln, std::string* line) {
  if (!passes::Is(ln, "LayerNormalization") || ln->num_inputs() < 2 || !ln->input(1)) return false;
  for (size_t i = 1; i < ln->num_outputs(); ++i)
    if (ln->output(i)) return false;  // Mean / InvStdDev: the fused op has none
  ir::Value* s = ln->input(0);
  ir::Node* add = s->producer();
  if (!passes::Is(add, "Add") || add->num_inputs() != 2 || passes::SoleUser(g, s) != ln) return false;
  if (s->type.dtype != DType::kFloat32 || !s->type.dims || ln->output(0)->type.dtype != DType::kFloat32) return false;
  const int64_t rank = static_cast<int64_t>(s->type.dims->size());
  int64_t axis = ln->attr_int("axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return false;
  for (size_t k = 0; k < 2; ++k) {
    const ir::Value* x = add->input(k);
    if (!x || x->type.dtype != DType::kFloat32 || !LeadingBroadcast(x->type, s->type, static_cast<size_t>(axis)))
      return false;
  }
  std::vector<ir::Value*> inputs = {add->input(0), add->input(1), ln->input(1)};
  if (ln->num_inputs() > 2 && ln->input(2)) inputs.push_back(ln->input(2));
  const std::string add_name = add->name, ln_name = ln->name;
  const std::map<std::string, ir::Attribute> attrs = ln->attrs;
  SP_ASSIGN_OR_RETURN(ir::Node * fused, passes::ReplaceWithFused(g, {add, ln}, "sampan", "AddLayerNorm", ln_name,
                                                                 inputs, attrs, ln->output(0)));
  *line = StrCat("Add '", add_name, "' + LayerNormalization '", ln_name, "' -> ", fused->Label());
  return true;
}

}  // namespace

Result<std::vector<std::string>> FuseAddLayerNorm(plan::Plan& plan) {
  return RewriteUntilNoneMatches(plan, FuseAt);
}

}  // namespace sampan::cpu
