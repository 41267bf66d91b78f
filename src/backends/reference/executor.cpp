#include "backends/reference/executor.h"

#include <unordered_map>
#include <unordered_set>

#include "ops/run_node.h"

namespace sampan::reference {

Executor::Executor(std::shared_ptr<const ir::Graph> graph) : graph_(std::move(graph)) {
  const auto& nodes = graph_->nodes();
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const ir::Value* in : nodes[i]->inputs())
      if (in) last_reader_[in] = i;
}

Status Executor::ValidateInputs(const std::map<std::string, Tensor>& inputs) const {
  std::map<std::string, std::pair<int64_t, std::string>> symbols;  // symbol -> (size, first input)
  for (const ir::Value* in : graph_->inputs()) {
    auto it = inputs.find(in->name());
    if (it == inputs.end()) return InvalidArgument("missing input '", in->name(), "' (", in->type.ToString(), ")");
    const Tensor& t = it->second;
    if (t.dtype() != in->type.dtype)
      return InvalidArgument("input '", in->name(), "' must be ", DTypeName(in->type.dtype), ", got ",
                             DTypeName(t.dtype()));
    if (!in->type.dims) continue;
    const ir::Dims& dims = *in->type.dims;
    if (static_cast<size_t>(t.rank()) != dims.size())
      return InvalidArgument("input '", in->name(), "' must have rank ", dims.size(), " (", in->type.ToString(),
                             "), got shape ", ShapeToString(t.shape()));
    for (size_t d = 0; d < dims.size(); ++d) {
      if (dims[d].known() && dims[d].value != t.dim(static_cast<int64_t>(d)))
        return InvalidArgument("input '", in->name(), "' dimension ", d, " must be ", dims[d].value, " (",
                               in->type.ToString(), "), got shape ", ShapeToString(t.shape()));
      if (!dims[d].known() && !dims[d].param.empty()) {
        auto [sit, inserted] =
            symbols.emplace(dims[d].param, std::make_pair(t.dim(static_cast<int64_t>(d)), in->name()));
        if (!inserted && sit->second.first != t.dim(static_cast<int64_t>(d)))
          return InvalidArgument("dimension '", dims[d].param, "' is ", sit->second.first, " in input '",
                                 sit->second.second, "' but ", t.dim(static_cast<int64_t>(d)), " in input '",
                                 in->name(), "'");
      }
    }
  }
  for (const auto& [name, t] : inputs) {
    bool found = false;
    for (const ir::Value* in : graph_->inputs()) found |= in->name() == name;
    if (!found) return InvalidArgument("the model has no input named '", name, "'");
  }
  return Status::Ok();
}

Result<std::vector<Tensor>> Executor::Run(const std::map<std::string, Tensor>& inputs, const ValueAllocator* alloc,
                                          const NodeObserver* observer) const {
  SP_RETURN_IF_ERROR(ValidateInputs(inputs));
  std::unordered_map<const ir::Value*, Tensor> live;
  for (const ir::Value* in : graph_->inputs()) live[in] = inputs.at(in->name());
  std::unordered_set<const ir::Value*> keep(graph_->outputs().begin(), graph_->outputs().end());
  const int64_t opset = graph_->opset();
  const auto& nodes = graph_->nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ir::Node& node = *nodes[i];
    std::vector<const Tensor*> args(node.num_inputs(), nullptr);
    for (size_t k = 0; k < node.num_inputs(); ++k) {
      const ir::Value* v = node.input(k);
      if (v == nullptr) continue;
      if (v->is_constant()) {
        args[k] = &v->data;
        continue;
      }
      auto it = live.find(v);
      if (it == live.end()) return Internal(node.Label(), ": input '", v->name(), "' was not computed");
      args[k] = &it->second;
    }
    std::vector<Tensor> outs;
    if (alloc != nullptr) {
      ops::OutputAllocator node_alloc = [&](size_t k, DType dtype, const Shape& shape) {
        return (*alloc)(node.output(k), dtype, shape);
      };
      SP_RETURN_IF_ERROR(ops::RunNode(node, opset, args, &outs, &node_alloc));
    } else {
      SP_RETURN_IF_ERROR(ops::RunNode(node, opset, args, &outs));
    }
    if (observer != nullptr) (*observer)(i, node, outs);
    for (size_t k = 0; k < node.num_outputs(); ++k)
      if (node.output(k)) live[node.output(k)] = std::move(outs[k]);
    for (const ir::Value* v : node.inputs()) {
      if (v == nullptr || keep.count(v)) continue;
      auto lr = last_reader_.find(v);
      if (lr != last_reader_.end() && lr->second == i) live.erase(v);
    }
  }
  std::vector<Tensor> results;
  for (const ir::Value* out : graph_->outputs()) {
    if (out->is_constant()) {
      results.push_back(out->data);
      continue;
    }
    auto it = live.find(out);
    if (it == live.end()) return Internal("graph output '", out->name(), "' was not computed");
    results.push_back(it->second);
  }
  return results;
}

}  // namespace sampan::reference
