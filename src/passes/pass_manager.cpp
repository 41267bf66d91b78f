#include <algorithm>
#include <chrono>
#include <map>

#include "ops/run_node.h"
#include "passes/pass.h"

namespace sampan::passes {

namespace {
std::map<std::string, PassDef>& Registry() {
  static std::map<std::string, PassDef> registry;
  return registry;
}

// Runs `pass` on every subgraph of `graph` (at any depth), each as a graph of its own: what it
// reads from enclosing graphs arrives through captures, which a pass sees as inputs, and its
// outputs are its interface. Nothing is rewritten across a subgraph's boundary.
Result<bool> RunOnSubgraphs(const PassDef& pass, ir::Graph& graph, PassContext& ctx) {
  bool changed = false;
  for (const auto& node : graph.nodes()) {
    for (ir::Graph* sub : node->subgraphs()) {
      const std::string where = StrCat(node->Label(), " subgraph '", sub->name, "'");
      Result<bool> c = pass.run(*sub, ctx);
      if (!c.ok()) return c.status().WithContext(where);
      if (*c) {
        sub->RemoveUnusedValues();
        Status st = sub->TopologicalSort();
        if (!st.ok()) return st.WithContext(where);
        changed = true;
      }
      SP_ASSIGN_OR_RETURN(bool inner, RunOnSubgraphs(pass, *sub, ctx));
      changed |= inner;
    }
  }
  return changed;
}
}  // namespace

bool RegisterPass(PassDef def) {
  std::string name = def.name;
  Registry().emplace(name, std::move(def));
  return true;
}

std::vector<const PassDef*> AllPasses() {
  std::vector<const PassDef*> out;
  for (auto& [name, def] : Registry()) out.push_back(&def);
  std::stable_sort(out.begin(), out.end(), [](const PassDef* a, const PassDef* b) {
    return a->order != b->order ? a->order < b->order : a->name < b->name;
  });
  return out;
}

const PassDef* FindPass(const std::string& name) {
  auto it = Registry().find(name);
  return it == Registry().end() ? nullptr : &it->second;
}

Status PassManager::Validate() const {
  for (const auto& name : options_.disabled) {
    if (FindPass(name)) continue;
    std::string valid;
    for (const PassDef* p : AllPasses()) valid += (valid.empty() ? "" : ", ") + p->name;
    return InvalidArgument("--disable-pass '", name, "': no such pass (passes: ", valid, ")");
  }
  return Status::Ok();
}

Status PassManager::Run(ir::Graph& graph) {
  SP_RETURN_IF_ERROR(Validate());
  for (const PassDef* pass : AllPasses()) {
    PassStats s;
    s.name = pass->name;
    s.nodes_before = graph.nodes().size();
    if (options_.disabled.count(pass->name)) {
      s.enabled = false;
      s.nodes_after = s.nodes_before;
      stats_.push_back(s);
      continue;
    }
    ctx_.current_pass = pass->name;
    auto t0 = std::chrono::steady_clock::now();
    Result<bool> changed = pass->run(graph, ctx_);
    if (!changed.ok()) return changed.status().WithContext(StrCat("pass '", pass->name, "'"));
    Result<bool> inner = RunOnSubgraphs(*pass, graph, ctx_);
    if (!inner.ok()) return inner.status().WithContext(StrCat("pass '", pass->name, "'"));
    s.changed = *changed || *inner;
    if (s.changed) graph.RemoveUnusedValues();
    if (options_.verify && s.changed) {
      Status st = graph.TopologicalSort();
      if (st.ok()) st = ir::Verify(graph);
      if (st.ok()) st = ops::InferTypes(graph);
      if (!st.ok()) return st.WithContext(StrCat("graph is invalid after pass '", pass->name, "'"));
    }
    s.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    s.nodes_after = graph.nodes().size();
    stats_.push_back(s);
    if (options_.after_pass) options_.after_pass(pass->name, graph);
  }
  return Status::Ok();
}

bool IsGraphOutput(const ir::Graph& graph, const ir::Value* v) {
  return std::find(graph.outputs().begin(), graph.outputs().end(), v) != graph.outputs().end();
}

bool HasSingleUse(const ir::Graph& graph, const ir::Value* v) {
  return v->uses().size() == 1 && !IsGraphOutput(graph, v);
}

Status ReplaceWithConstants(ir::Graph& graph, ir::Node* node, const std::vector<Tensor>& values) {
  std::vector<ir::Value*> outs = node->outputs();
  graph.RemoveNode(node);
  for (size_t i = 0; i < outs.size(); ++i) {
    ir::Value* out = outs[i];
    if (out == nullptr) continue;
    out->data = values.at(i);
    out->type = ir::TensorType::Static(values[i].dtype(), values[i].shape());
  }
  return Status::Ok();
}

bool CanForward(const ir::Graph& graph, const ir::Value* from, const ir::Value* to) {
  if (!IsGraphOutput(graph, from)) return true;
  const bool to_is_input =
      std::find(graph.inputs().begin(), graph.inputs().end(), to) != graph.inputs().end() || graph.is_capture(to);
  return !to_is_input && !IsGraphOutput(graph, to) && !to->is_constant();
}

Status ForwardValue(ir::Graph& graph, ir::Value* from, ir::Value* to) {
  if (!CanForward(graph, from, to))
    return Internal("cannot forward graph output '", from->name(), "' to '", to->name(), "'");
  const bool was_output = IsGraphOutput(graph, from);
  graph.ReplaceAllUsesWith(from, to);
  if (was_output) {
    std::string name = from->name();
    SP_RETURN_IF_ERROR(graph.RenameValue(from, graph.FreshName(name + "_replaced")));
    SP_RETURN_IF_ERROR(graph.RenameValue(to, name));
  }
  return Status::Ok();
}

}  // namespace sampan::passes
