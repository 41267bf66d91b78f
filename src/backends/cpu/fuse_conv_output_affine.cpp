#include "backends/cpu/fuse_conv_output_affine.h"

#include <cmath>

#include "backends/cpu/lowering_rewrite.h"
#include "passes/fusion_util.h"

namespace sampan::cpu {
namespace {

// y' = y * scale + bias after `n` (reading y), when n is a scalar Mul/Div/Add/Sub of y.
bool Absorb(const ir::Node* n, const ir::Value* y, double* scale, double* bias) {
  if (!n->domain.empty() || n->num_inputs() != 2 || n->num_outputs() != 1) return false;
  const bool y_first = n->input(0) == y;
  if (!y_first && n->input(1) != y) return false;
  const std::optional<double> c = passes::ScalarConst(passes::Other(n, y));
  if (!c || !std::isfinite(*c)) return false;
  // A one-element constant of higher rank than y broadcasts y to more dims: not a scalar here.
  if (!y->type.has_rank() || passes::Other(n, y)->data.rank() > static_cast<int64_t>(y->type.dims->size()))
    return false;
  if (n->output(0)->type.dtype != DType::kFloat32 || passes::Other(n, y)->type.dtype != DType::kFloat32) return false;
  if (n->op_type == "Mul") {
    *scale *= *c;
    *bias *= *c;
  } else if (n->op_type == "Div" && y_first && *c != 0) {
    *scale /= *c;
    *bias /= *c;
  } else if (n->op_type == "Add") {
    *bias += *c;
  } else if (n->op_type == "Sub") {
    if (y_first) {
      *bias -= *c;
    } else {
      *scale = -*scale;
      *bias = *c - *bias;
    }
  } else {
    return false;
  }
  return true;
}

// The chain of scalar affines after `conv` folded into it; false when there is none.
Result<bool> FuseAt(ir::Graph& g, ir::Node* conv, std::string* line) {
  if (conv->domain != "sampan" || conv->op_type != "FusedConv" || conv->num_outputs() != 1) return false;
  if (conv->output(0)->type.dtype != DType::kFloat32) return false;
  double scale = conv->attr_float("output_scale", 1.f), bias = conv->attr_float("output_bias", 0.f);
  std::vector<ir::Node*> chain = {conv};
  ir::Value* y = conv->output(0);
  std::string what;
  for (ir::Node* user = passes::SoleUser(g, y); user && Absorb(user, y, &scale, &bias); user = passes::SoleUser(g, y)) {
    chain.push_back(user);
    what += StrCat(what.empty() ? "" : ", ", user->op_type, " ", user->name);
    y = user->output(0);
  }
  if (chain.size() == 1) return false;
  std::map<std::string, ir::Attribute> attrs = conv->attrs;
  attrs["output_scale"] = ir::Attribute::Float(static_cast<float>(scale));
  attrs["output_bias"] = ir::Attribute::Float(static_cast<float>(bias));
  const std::string name = conv->name;
  std::vector<ir::Value*> inputs = conv->inputs();
  SP_RETURN_IF_ERROR(passes::ReplaceWithFused(g, chain, "sampan", "FusedConv", name, inputs, attrs, y).status());
  *line = StrCat(name, " <- ", what, " (output_scale ", scale, ", output_bias ", bias, ")");
  return true;
}

}  // namespace

Result<std::vector<std::string>> FuseConvOutputAffine(plan::Plan& plan) {
  return RewriteUntilNoneMatches(plan, FuseAt);
}

}  // namespace sampan::cpu
