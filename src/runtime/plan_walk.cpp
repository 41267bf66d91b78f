#include "runtime/plan_walk.h"

#include <algorithm>

#include "ops/fold_limits.h"
#include "ops/op.h"
#include "ops/run_node.h"

namespace sampan::runtime {

std::map<std::string, ConcreteType> ConcreteTypesOf(const std::map<std::string, Tensor>& inputs) {
  std::map<std::string, ConcreteType> types;
  for (const auto& [name, t] : inputs) types[name] = ConcreteType{t.dtype(), t.shape()};
  return types;
}

const char* NodeFateName(NodeFate fate) {
  switch (fate) {
    case NodeFate::kFolded:
      return "folded";
    case NodeFate::kLowered:
      return "lowered";
    case NodeFate::kUnsupported:
      return "unsupported";
  }
  return "?";
}

const PlanValue* PlanWalk::value(const ir::Value* v) const {
  auto it = values.find(v);
  return it == values.end() ? nullptr : &it->second;
}

const Tensor* PlanWalk::known(const ir::Value* v) const {
  if (const PlanValue* p = value(v)) return p->known;
  return v->is_constant() ? &v->data : nullptr;
}

size_t PlanWalk::count(NodeFate fate) const {
  return static_cast<size_t>(
      std::count_if(nodes.begin(), nodes.end(), [&](const WalkedNode& n) { return n.fate == fate; }));
}

Result<PlanWalk> WalkPlan(const ir::Graph& graph, const std::map<std::string, ConcreteType>& inputs,
                          const LowerFn& lower, const LowerFn& fallback) {
  PlanWalk walk;
  for (const ir::Value* in : graph.inputs()) {
    auto it = inputs.find(in->name());
    if (it == inputs.end()) return InvalidArgument("missing input '", in->name(), "'");
    walk.values[in] = PlanValue{it->second.dtype, it->second.shape, nullptr};
  }
  const int64_t opset = graph.opset();
  const auto& nodes = graph.nodes();
  for (size_t index = 0; index < nodes.size(); ++index) {
    const ir::Node& node = *nodes[index];
    const ops::OpDef* def = ops::FindOp(node.domain, node.op_type);
    if (def == nullptr) return Unsupported(node.Label(), ": op is not registered");
    std::vector<ops::InferInput> infer_in(node.num_inputs());
    std::vector<const PlanValue*> in_values(node.num_inputs(), nullptr);
    bool all_known = true;
    for (size_t k = 0; k < node.num_inputs(); ++k) {
      const ir::Value* v = node.input(k);
      if (v == nullptr) continue;
      auto it = walk.values.find(v);
      if (it == walk.values.end()) {
        if (!v->is_constant()) return Internal(node.Label(), ": input '", v->name(), "' is not computed before it");
        it = walk.values.emplace(v, PlanValue{v->data.dtype(), v->data.shape(), &v->data}).first;
      }
      const PlanValue& pv = it->second;
      in_values[k] = &pv;
      infer_in[k].present = true;
      infer_in[k].dtype = pv.dtype;
      infer_in[k].dims = ir::Dims();
      for (int64_t d : pv.shape) infer_in[k].dims->push_back(ir::Dim::Known(d));
      infer_in[k].value = pv.known;
      all_known &= pv.known != nullptr;
    }
    ops::InferContext ictx(node, opset, infer_in);
    SP_RETURN_IF_ERROR(ops::RunInfer(*def, ictx));
    bool static_out = true, values_out = true;
    int64_t out_elements = 0;                 // of the outputs whose shape inference knows
    size_t dynamic_out = node.num_outputs();  // the first output whose shape is not known
    for (size_t k = 0; k < node.num_outputs(); ++k) {
      if (node.output(k) == nullptr) continue;
      const ir::TensorType& t = ictx.output(k);
      values_out &= ictx.output_value(k).has_value();
      if (t.is_static()) {
        out_elements += NumElements(t.static_shape());
      } else {
        static_out = false;
        dynamic_out = std::min(dynamic_out, k);
      }
    }
    // Folding: inference gave the values, or the inputs are known and the node is deterministic
    // and small. A known-input node whose output shape inference cannot tell (NonZero of a
    // constant) is evaluated too: that is the only way to learn the shape before run time.
    const bool inputs_known = all_known && !ops::IsNondeterministic(node);
    if ((static_out && values_out) || (inputs_known && out_elements <= ops::kMaxShapeFoldElements)) {
      std::vector<Tensor> outs;
      if (static_out && values_out) {
        for (size_t k = 0; k < node.num_outputs(); ++k)
          outs.push_back(node.output(k) ? *ictx.output_value(k) : Tensor());
      } else {
        std::vector<const Tensor*> args;
        for (const ops::InferInput& in : infer_in) args.push_back(in.present ? in.value : nullptr);
        SP_RETURN_IF_ERROR(ops::RunNode(node, opset, args, &outs));
      }
      for (size_t k = 0; k < node.num_outputs(); ++k) {
        const ir::Value* v = node.output(k);
        if (v == nullptr) continue;
        if (k >= outs.size() || !outs[k].defined())
          return Internal(node.Label(), ": folding gave no value for output '", v->name(), "'");
        walk.folded.push_back(std::make_unique<Tensor>(std::move(outs[k])));
        const Tensor& kept = *walk.folded.back();
        walk.values[v] = PlanValue{kept.dtype(), kept.shape(), &kept};
      }
      walk.nodes.push_back(WalkedNode{&node, NodeFate::kFolded, {}});
      continue;
    }
    if (!static_out) {
      walk.dynamic = true;
      walk.dynamic_node = &node;
      walk.dynamic_reason = StrCat(node.Label(), ": the shape of output '", node.output(dynamic_out)->name(), "' (",
                                   ictx.output(dynamic_out).ToString(), ") depends on values computed at run time");
      return walk;
    }
    LowerRequest req{node, index, opset, in_values, std::vector<const PlanValue*>(node.num_outputs(), nullptr)};
    for (size_t k = 0; k < node.num_outputs(); ++k) {
      const ir::Value* v = node.output(k);
      if (v == nullptr) continue;
      PlanValue& pv = walk.values[v];
      pv = PlanValue{ictx.output(k).dtype, ictx.output(k).static_shape(), nullptr};
      req.outputs[k] = &pv;
    }
    WalkedNode walked{&node, NodeFate::kLowered, {}};
    Status st = lower ? lower(req) : Unsupported(node.Label(), ": no lowering given");
    if (!st.ok()) {
      if (st.code() != StatusCode::kUnsupported) {
        // Errors name the node; a lowering's own message may not.
        return st.message().find(node.Label()) == std::string::npos ? st.WithContext(node.Label()) : st;
      }
      walked.fate = NodeFate::kUnsupported;
      walked.reason = st.message();
      if (fallback) {
        Status fb = fallback(req);
        if (!fb.ok()) return fb.WithContext(StrCat(node.Label(), ": fallback after \"", st.message(), "\""));
      }
    }
    walk.nodes.push_back(std::move(walked));
  }
  return walk;
}

// ---- lifetimes -----------------------------------------------------------------

const ir::Value* Lifetimes::RootOf(const ir::Value* v) const {
  auto it = root.find(v);
  return it == root.end() ? v : it->second;
}

Lifetimes ComputeLifetimes(const ir::Graph& graph, const std::vector<StepMemory>& steps) {
  Lifetimes life;
  std::unordered_map<const ir::Value*, size_t> owner_index;
  const int end = static_cast<int>(steps.size());
  auto add_owner = [&](const ir::Value* v, int first, int last) {
    if (owner_index.count(v)) return;
    owner_index[v] = life.owners.size();
    life.owners.push_back(ValueLifetime{v, first, last});
  };
  for (const ir::Value* in : graph.inputs()) add_owner(in, 0, end);
  for (size_t s = 0; s < steps.size(); ++s) {
    const ir::Node& node = *steps[s].node;
    const int t = static_cast<int>(s);
    for (const ir::Value* v : node.inputs()) {
      if (v == nullptr) continue;
      auto it = owner_index.find(life.RootOf(v));
      if (it != owner_index.end()) life.owners[it->second].last = std::max(life.owners[it->second].last, t);
    }
    for (size_t k = 0; k < node.num_outputs(); ++k) {
      const ir::Value* v = node.output(k);
      if (v == nullptr) continue;
      const int src = k < steps[s].view_of.size() ? steps[s].view_of[k] : -1;
      if (src >= 0 && node.input(static_cast<size_t>(src)) != nullptr) {
        life.root[v] = life.RootOf(node.input(static_cast<size_t>(src)));
        continue;
      }
      add_owner(v, t, t);
    }
  }
  for (const ir::Value* out : graph.outputs()) {
    auto it = owner_index.find(life.RootOf(out));
    if (it != owner_index.end()) life.owners[it->second].last = end;
  }
  return life;
}

ArenaRequest ArenaBlocksFor(const Lifetimes& lifetimes,
                            const std::function<std::optional<size_t>(const ir::Value*)>& bytes) {
  ArenaRequest req;
  for (const ValueLifetime& l : lifetimes.owners) {
    const std::optional<size_t> size = bytes(l.value);
    if (!size) continue;
    req.values.push_back(l.value);
    req.blocks.push_back(ArenaBlock{*size, l.first, l.last});
  }
  return req;
}

}  // namespace sampan::runtime
