#include "backends/cuda/fuse_conv_pool.h"

#include "backends/cuda/lowering_pass.h"
#include "passes/fusion_util.h"

namespace sampan::cuda {
namespace {

bool HalfType(DType t) {
  return t == DType::kFloat16 || t == DType::kBFloat16;
}

bool AllOnes(const std::vector<int64_t>& v) {
  for (int64_t x : v)
    if (x != 1) return false;
  return true;
}

struct Match {
  ir::Node* conv = nullptr;
  ir::Node* pool = nullptr;
};

bool StemConv(const ir::Node* c) {
  if (c == nullptr) return false;
  const bool conv = passes::Is(c, "Conv") || (c->domain == "sampan" && c->op_type == "FusedConv");
  if (!conv || c->num_outputs() != 1 || !c->output(0) || c->num_inputs() < 2 || c->num_inputs() > 3) return false;
  const ir::Value* x = c->input(0);
  const ir::Value* w = c->input(1);
  if (!x || !w || !w->is_constant() || w->data.shape().size() != 4 || !x->type.has_rank() || x->type.dims->size() != 4)
    return false;
  const Shape& ws = w->data.shape();
  if (ws[1] > 4 || ws[0] % 8 != 0 || ws[2] * ws[3] > 121) return false;
  if (c->attr_int("group", 1) != 1 || !AllOnes(c->attr_ints("dilations", {1, 1}))) return false;
  return HalfType(c->output(0)->type.dtype) && HalfType(x->type.dtype);
}

bool PlainMaxPool(const ir::Node* p) {
  if (!passes::Is(p, "MaxPool") || p->num_inputs() != 1 || !p->output(0)) return false;
  for (size_t i = 1; i < p->num_outputs(); ++i)
    if (p->output(i) != nullptr) return false;  // Indices
  const std::string pad = p->attr_string("auto_pad", "NOTSET");
  return p->attr_ints("kernel_shape").size() == 2 && p->attr_int("storage_order", 0) == 0 &&
         (pad == "NOTSET" || pad.empty()) && AllOnes(p->attr_ints("dilations", {1, 1}));
}

std::optional<Match> NextMatch(const ir::Graph& g) {
  for (const auto& np : g.nodes()) {
    ir::Node* c = np.get();
    if (!StemConv(c)) continue;
    ir::Node* p = passes::SoleUser(g, c->output(0));
    if (!PlainMaxPool(p)) continue;
    return Match{c, p};
  }
  return std::nullopt;
}

}  // namespace

Result<std::vector<std::string>> FuseConvPool(plan::Plan& plan) {
  ir::Graph& g = *plan.graph;
  std::vector<std::string> done;
  while (std::optional<Match> m = NextMatch(g)) {
    const std::string label = m->conv->Label(), pool_label = m->pool->Label(), name = m->conv->name;
    const std::string pool_name = m->pool->name;
    auto attrs = m->conv->attrs;
    const ir::Node& p = *m->pool;
    attrs["pool_kernel_shape"] = ir::Attribute::Ints(p.attr_ints("kernel_shape"));
    attrs["pool_strides"] = ir::Attribute::Ints(p.attr_ints("strides", {1, 1}));
    attrs["pool_pads"] = ir::Attribute::Ints(p.attr_ints("pads", {0, 0, 0, 0}));
    attrs["pool_ceil_mode"] = ir::Attribute::Int(p.attr_int("ceil_mode", 0));
    const std::vector<ir::Value*> inputs(m->conv->inputs().begin(), m->conv->inputs().end());
    ir::Value* out = m->pool->output(0);
    SP_ASSIGN_OR_RETURN(ir::Node * fused, passes::ReplaceWithFused(g, {m->conv, m->pool}, "sampan", "FusedConvPool",
                                                                   name, inputs, attrs, out));
    plan.choices.erase(pool_name);
    done.push_back(StrCat("cuda: ", label, " + ", pool_label, " -> ", fused->Label()));
    plan.rewrites.push_back(done.back());
  }
  if (!done.empty()) SP_RETURN_IF_ERROR(passes::FinishRewrite(g));
  return done;
}

SAMPAN_REGISTER_TARGET_PASS("cuda", "fuse_conv_pool", (PlanRewritePass<FuseConvPool>));

}  // namespace sampan::cuda
