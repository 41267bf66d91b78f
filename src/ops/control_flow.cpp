#include "ops/control_flow.h"

#include <cstring>
#include <memory>
#include <unordered_map>

#include "ops/common.h"
#include "ops/fold_limits.h"
#include "ops/run_node.h"

namespace sampan::ops {

namespace {

// What inference knows of one subgraph value while walking it.
struct Known {
  DType dtype = DType::kUndefined;
  std::optional<ir::Dims> dims;
  const Tensor* value = nullptr;
};

Known FromInfer(const InferInput& in, const ir::Value* declared) {
  if (!in.present || in.dtype == DType::kUndefined) return Known{declared->type.dtype, declared->type.dims, nullptr};
  return Known{in.dtype, in.dims, in.value};
}

}  // namespace

std::optional<ir::Dims> MergeDims(const std::optional<ir::Dims>& a, const std::optional<ir::Dims>& b) {
  if (!a || !b || a->size() != b->size()) return std::nullopt;
  ir::Dims out(a->size());
  for (size_t i = 0; i < a->size(); ++i) out[i] = (*a)[i] == (*b)[i] ? (*a)[i] : ir::Dim::Unknown();
  return out;
}

std::vector<InferInput> CaptureInputs(const InferContext& ctx) {
  std::vector<InferInput> out;
  for (size_t i = ctx.node().num_explicit_inputs(); i < ctx.num_inputs(); ++i) out.push_back(ctx.input(i));
  return out;
}

std::vector<const Tensor*> CaptureTensors(const KernelContext& ctx) {
  std::vector<const Tensor*> out;
  for (size_t i = ctx.node.num_explicit_inputs(); i < ctx.inputs.size(); ++i) out.push_back(ctx.inputs[i]);
  return out;
}

void SetKernelOutput(KernelContext& ctx, size_t k, Tensor value) {
  Tensor& out = ctx.out(k);
  if (out.defined() && !IsObjectDType(value.dtype()) && out.dtype() == value.dtype() && out.shape() == value.shape() &&
      out.raw() != value.raw()) {
    if (value.nbytes() > 0) std::memcpy(out.mutable_raw(), value.raw(), value.nbytes());
    return;
  }
  out = std::move(value);
}

void AnnotateSubgraphTypes(ir::Graph& graph) {
  for (const auto& node : graph.nodes()) {
    const size_t first = node->num_explicit_inputs();
    for (ir::Graph* sub : node->subgraphs()) {
      for (size_t k = 0; k < sub->captures().size() && first + k < node->num_inputs(); ++k)
        if (const ir::Value* outer = node->input(first + k)) sub->captures()[k]->type = outer->type;
      (void)InferTypes(*sub);  // advisory: see the header
      AnnotateSubgraphTypes(*sub);
    }
  }
}

Result<std::vector<SubgraphOutput>> InferSubgraph(const ir::Graph& graph, int64_t opset,
                                                  const std::vector<InferInput>& inputs,
                                                  const std::vector<InferInput>& captures, const std::string& where) {
  if (inputs.size() != graph.inputs().size())
    return Internal(where, ": binds ", inputs.size(), " inputs to a subgraph of ", graph.inputs().size());
  if (captures.size() != graph.captures().size())
    return Internal(where, ": binds ", captures.size(), " enclosing values to a subgraph reading ",
                    graph.captures().size());
  std::unordered_map<const ir::Value*, Known> known;
  std::vector<std::unique_ptr<Tensor>> folded;
  for (size_t i = 0; i < inputs.size(); ++i) known[graph.inputs()[i]] = FromInfer(inputs[i], graph.inputs()[i]);
  for (size_t i = 0; i < captures.size(); ++i) known[graph.captures()[i]] = FromInfer(captures[i], graph.captures()[i]);
  auto lookup = [&](const ir::Value* v) -> Known {
    if (auto it = known.find(v); it != known.end()) return it->second;
    if (v->is_constant()) return Known{v->data.dtype(), DimsOf(v->data.shape()), &v->data};
    return Known{v->type.dtype, v->type.dims, nullptr};
  };
  for (const auto& node_ptr : graph.nodes()) {
    const ir::Node& node = *node_ptr;
    const OpDef* def = FindOp(node.domain, node.op_type);
    if (def == nullptr) return Unsupported(where, ": ", node.Label(), ": op is not registered");
    std::vector<InferInput> in(node.num_inputs());
    bool input_unknown = false, all_values = true;
    int64_t fold_elements = 0;
    for (size_t k = 0; k < node.num_inputs(); ++k) {
      const ir::Value* v = node.input(k);
      if (v == nullptr) continue;
      const Known kv = lookup(v);
      in[k] = InferInput{true, kv.dtype, kv.dims, kv.value};
      input_unknown |= kv.dtype == DType::kUndefined;
      if (kv.value == nullptr)
        all_values = false;
      else
        fold_elements += kv.value->numel();
    }
    // An input whose type nothing says: this node's outputs keep their declared types.
    if (input_unknown) continue;
    InferContext ictx(node, opset, in);
    Status st = RunInfer(*def, ictx);
    if (!st.ok()) return st.WithContext(where);
    bool fold =
        all_values && fold_elements <= kMaxShapeFoldElements && node.num_outputs() > 0 && !IsNondeterministic(node);
    for (size_t k = 0; k < node.num_outputs(); ++k) {
      const ir::Value* out = node.output(k);
      if (out == nullptr) continue;
      const ir::TensorType& t = ictx.output(k);
      Known kv{t.dtype == DType::kUndefined ? out->type.dtype : t.dtype, t.dims ? t.dims : out->type.dims, nullptr};
      if (ictx.output_value(k)) {
        folded.push_back(std::make_unique<Tensor>(*ictx.output_value(k)));
        kv.value = folded.back().get();
        fold = false;
      }
      if (!t.is_static() || NumElements(t.static_shape()) > kMaxShapeFoldElements) fold = false;
      known[out] = kv;
    }
    if (fold) {
      std::vector<const Tensor*> args(node.num_inputs(), nullptr);
      for (size_t k = 0; k < node.num_inputs(); ++k) args[k] = in[k].present ? in[k].value : nullptr;
      std::vector<Tensor> outs;
      if (RunNode(node, opset, args, &outs).ok()) {
        for (size_t k = 0; k < node.num_outputs() && k < outs.size(); ++k) {
          if (node.output(k) == nullptr || !outs[k].defined()) continue;
          folded.push_back(std::make_unique<Tensor>(std::move(outs[k])));
          known[node.output(k)].value = folded.back().get();
        }
      }
    }
  }
  std::vector<SubgraphOutput> result;
  for (const ir::Value* out : graph.outputs()) {
    const Known kv = lookup(out);
    SubgraphOutput o{kv.dtype, kv.dims, std::nullopt};
    if (kv.value) o.value = *kv.value;
    result.push_back(std::move(o));
  }
  return result;
}

namespace {
thread_local SubgraphExecutor* current_executor = nullptr;
}  // namespace

ScopedSubgraphExecutor::ScopedSubgraphExecutor(SubgraphExecutor* executor) : previous_(current_executor) {
  current_executor = executor;
}

ScopedSubgraphExecutor::~ScopedSubgraphExecutor() {
  current_executor = previous_;
}

SubgraphRunner::SubgraphRunner(const ir::Graph& graph, int64_t opset, std::string where)
    : graph_(graph), opset_(opset), where_(std::move(where)) {
  // A computed value is released after its last reader; graph outputs are kept.
  const auto& nodes = graph_.nodes();
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const ir::Value* v : nodes[i]->inputs())
      if (v) last_reader_[v] = i;
  for (const ir::Value* v : graph_.outputs()) last_reader_[v] = nodes.size();
}

Status SubgraphRunner::Run(const std::vector<const Tensor*>& inputs, const std::vector<const Tensor*>& captures,
                           std::vector<Tensor>* outputs) const {
  if (inputs.size() != graph_.inputs().size() || captures.size() != graph_.captures().size())
    return Internal(where_, ": binds ", inputs.size(), " inputs and ", captures.size(),
                    " enclosing values to a subgraph of ", graph_.inputs().size(), " and ", graph_.captures().size());
  if (current_executor != nullptr) {
    SP_ASSIGN_OR_RETURN(bool ran, current_executor->TryRun(graph_, opset_, inputs, captures, outputs, where_));
    if (ran) return Status::Ok();
  }
  std::unordered_map<const ir::Value*, const Tensor*> bound;
  for (size_t i = 0; i < inputs.size(); ++i) bound[graph_.inputs()[i]] = inputs[i];
  for (size_t i = 0; i < captures.size(); ++i) bound[graph_.captures()[i]] = captures[i];
  std::unordered_map<const ir::Value*, Tensor> live;
  auto find = [&](const ir::Value* v) -> const Tensor* {
    if (auto it = live.find(v); it != live.end()) return &it->second;
    if (auto it = bound.find(v); it != bound.end()) return it->second;
    return v->is_constant() ? &v->data : nullptr;
  };
  const auto& nodes = graph_.nodes();
  std::vector<const Tensor*> args;
  std::vector<Tensor> outs;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& node = *nodes[i];
    args.assign(node.num_inputs(), nullptr);
    for (size_t k = 0; k < node.num_inputs(); ++k) {
      const ir::Value* v = node.input(k);
      if (v == nullptr) continue;
      args[k] = find(v);
      if (args[k] == nullptr) return Internal(where_, ": ", node.Label(), ": input '", v->name(), "' was not computed");
    }
    Status st = RunNode(node, opset_, args, &outs);
    if (!st.ok()) return st.WithContext(where_);
    for (size_t k = 0; k < node.num_outputs(); ++k)
      if (node.output(k)) live[node.output(k)] = std::move(outs[k]);
    for (const ir::Value* v : node.inputs()) {
      auto lr = last_reader_.find(v);
      if (v != nullptr && lr != last_reader_.end() && lr->second == i) live.erase(v);
    }
  }
  outputs->clear();
  for (const ir::Value* v : graph_.outputs()) {
    const Tensor* t = find(v);
    if (t == nullptr || !t->defined()) return Internal(where_, ": subgraph output '", v->name(), "' was not computed");
    outputs->push_back(*t);
  }
  return Status::Ok();
}

}  // namespace sampan::ops
