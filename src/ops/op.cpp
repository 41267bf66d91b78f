#include "ops/op.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace sampan::ops {

namespace {
std::map<std::pair<std::string, std::string>, OpDef>& Registry() {
  static std::map<std::pair<std::string, std::string>, OpDef> registry;
  return registry;
}
std::string NormalizeDomain(const std::string& d) {
  return d == "ai.onnx" ? "" : d;
}
}  // namespace

bool RegisterOp(OpDef def) {
  auto key = std::make_pair(NormalizeDomain(def.domain), def.op_type);
  if (!Registry().emplace(key, std::move(def)).second) {
    std::fprintf(stderr, "sampan: op %s registered twice\n", key.second.c_str());
    std::abort();
  }
  return true;
}

Status RunInfer(const OpDef& def, InferContext& ctx) {
  if (!def.strings)
    for (size_t i = 0; i < ctx.num_inputs(); ++i)
      if (ctx.has_input(i) && ctx.input_dtype(i) == DType::kString)
        return ctx.NotSupported("input ", i, " is a string tensor, which this op does not take");
  if (!def.sequences)
    for (size_t i = 0; i < ctx.num_inputs(); ++i)
      if (ctx.has_input(i) && (ctx.input_dtype(i) == DType::kSequence || ctx.input_dtype(i) == DType::kOptional))
        return ctx.NotSupported("input ", i, " is a ", DTypeName(ctx.input_dtype(i)), ", which this op does not take");
  SP_RETURN_IF_ERROR(def.infer(ctx));
  if (!def.strings)
    for (size_t i = 0; i < ctx.num_outputs(); ++i)
      if (ctx.output(i).dtype == DType::kString)
        return ctx.NotSupported("output ", i, " would be a string tensor, which this op does not produce");
  if (!def.sequences)
    for (size_t i = 0; i < ctx.num_outputs(); ++i)
      if (ctx.output(i).dtype == DType::kSequence || ctx.output(i).dtype == DType::kOptional)
        return ctx.NotSupported("output ", i, " would be a ", DTypeName(ctx.output(i).dtype),
                                ", which this op does not produce");
  return Status::Ok();
}

const OpDef* FindOp(const std::string& domain, const std::string& op_type) {
  auto it = Registry().find({NormalizeDomain(domain), op_type});
  return it == Registry().end() ? nullptr : &it->second;
}

std::vector<const OpDef*> AllOps() {
  std::vector<const OpDef*> out;
  for (auto& [k, v] : Registry()) out.push_back(&v);
  return out;
}

bool IsNondeterministic(const ir::Node& node) {
  const OpDef* def = FindOp(node.domain, node.op_type);
  if (def == nullptr) return true;
  // A node with subgraphs (If, Loop, Scan) is as deterministic as the nodes inside them.
  for (const ir::Graph* g : node.subgraphs())
    for (const auto& inner : g->nodes())
      if (IsNondeterministic(*inner)) return true;
  switch (def->determinism) {
    case Determinism::kDeterministic:
      return false;
    case Determinism::kRandom:
      return true;
    case Determinism::kRandomInTraining: {
      const ir::Value* training = node.input(2);
      return training != nullptr &&
             !(training->is_constant() && training->data.numel() == 1 && ElementAsInt64(training->data, 0) == 0);
    }
  }
  return true;
}

int64_t InferContext::input_rank(size_t i) const {
  if (!has_input(i) || !inputs_[i].dims) return -1;
  return static_cast<int64_t>(inputs_[i].dims->size());
}

std::optional<Shape> InferContext::input_static_shape(size_t i) const {
  if (!has_input(i) || !inputs_[i].dims) return std::nullopt;
  Shape s;
  for (const ir::Dim& d : *inputs_[i].dims) {
    if (!d.known()) return std::nullopt;
    s.push_back(d.value);
  }
  return s;
}

void InferContext::set_output(size_t i, DType dtype, std::optional<ir::Dims> dims) {
  if (i >= outputs_.size()) return;
  outputs_[i].dtype = dtype;
  outputs_[i].dims = std::move(dims);
}

void InferContext::set_output_shape(size_t i, DType dtype, const Shape& shape) {
  if (i >= outputs_.size()) return;
  outputs_[i] = ir::TensorType::Static(dtype, shape);
}

void InferContext::set_output_value(size_t i, Tensor value) {
  if (i >= outputs_.size()) return;
  outputs_[i] = ir::TensorType::Static(value.dtype(), value.shape());
  output_values_[i] = std::move(value);
}

Status InferContext::ExpectInputs(size_t min, size_t max) const {
  size_t n = inputs_.size();
  while (n > 0 && !inputs_[n - 1].present) --n;  // trailing omitted optionals do not count
  if (n < min || inputs_.size() > max)
    return Error("expects ", min == max ? StrCat(min) : StrCat(min, " to ", max), " inputs, got ", inputs_.size());
  for (size_t i = 0; i < min; ++i)
    if (!inputs_[i].present) return Error("required input ", i, " is missing");
  return Status::Ok();
}

}  // namespace sampan::ops
