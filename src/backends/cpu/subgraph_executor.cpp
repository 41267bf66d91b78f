#include "backends/cpu/subgraph_executor.h"

#include "backends/cpu/cpu_engine.h"
#include "ops/run_node.h"

namespace sampan::cpu {

std::atomic<uint64_t> CpuSubgraphExecutor::taken_{0};
std::atomic<uint64_t> CpuSubgraphExecutor::declined_{0};

Result<bool> CpuSubgraphExecutor::TryRun(const ir::Graph& graph, int64_t opset,
                                         const std::vector<const Tensor*>& inputs,
                                         const std::vector<const Tensor*>& captures, std::vector<Tensor>* outputs,
                                         const std::string& where) {
  auto decline = [&] {
    declined_.fetch_add(1);
    return false;
  };
  Entry& e = entries_[&graph];
  if (e.reference_only) return decline();
  std::vector<const Tensor*> bound = inputs;
  bound.insert(bound.end(), captures.begin(), captures.end());
  std::vector<std::pair<DType, Shape>> signature;
  for (const Tensor* t : bound) {
    if (t == nullptr || !t->defined() || IsObjectDType(t->dtype())) {
      e.reference_only = t != nullptr && t->defined();  // sequences stay with the reference kernels
      return decline();
    }
    signature.emplace_back(t->dtype(), t->shape());
  }
  if (!e.standalone) {
    // The subgraph as a graph of its own: captures become inputs after its inputs.
    std::shared_ptr<ir::Graph> g = graph.Clone();
    for (ir::Value* c : g->captures()) g->inputs().push_back(c);
    g->captures().clear();
    if (!g->opsets.count("")) g->opsets[""] = opset;
    e.standalone = std::move(g);
  }
  Program* prog = nullptr;
  for (auto& [sig, p] : e.programs)
    if (sig == signature) prog = p.get();
  if (prog == nullptr) {
    if (e.programs.size() >= kMaxSignatures) {
      // Shapes that keep changing: compiling a program per iteration costs more than it saves.
      e.programs.clear();
      e.graphs.clear();
      e.reference_only = true;
      return decline();
    }
    // Typed for this signature: the inputs' concrete types, everything else inferred from them
    // (a Loop's carried shapes may differ from what the model declares for the body).
    std::shared_ptr<ir::Graph> typed = e.standalone->Clone();
    for (ir::Value* v : typed->values())
      if (!v->is_constant()) v->type = ir::TensorType{v->type.dtype, std::nullopt};
    std::map<std::string, Tensor> named;
    for (size_t i = 0; i < bound.size(); ++i) {
      ir::Value* in = typed->inputs()[i];
      in->type = ir::TensorType::Static(bound[i]->dtype(), bound[i]->shape());
      named[in->name()] = *bound[i];
    }
    Status inferred = ops::InferTypes(*typed);
    if (!inferred.ok()) {
      if (inferred.code() != StatusCode::kUnsupported) return inferred.WithContext(where);
      e.reference_only = true;
      return decline();
    }
    PrepareOptions po;
    po.threads = engine_.threads();  // (the plan records no algorithms inside subgraphs: timed here)
    auto made = Program::Prepare(*typed, named, engine_.engine(), engine_.weights(), po);
    if (!made.ok()) {
      if (made.status().code() != StatusCode::kUnsupported) return made.status().WithContext(where);
      e.reference_only = true;
      return decline();
    }
    e.graphs.push_back(typed);
    memory_.Add(runtime::MemoryKind::kArena, runtime::MemoryPlace::kHost, 0, (*made)->arena_allocated_bytes());
    memory_.Add(runtime::MemoryKind::kFolded, runtime::MemoryPlace::kHost, 0, (*made)->folded_bytes());
    e.programs.emplace_back(signature, std::move(made).value());
    prog = e.programs.back().second.get();
  }
  if (prog->dynamic()) return decline();  // shapes that depend on data: the reference kernels run it
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < bound.size(); ++i) named[e.standalone->inputs()[i]->name()] = *bound[i];
  SP_RETURN_IF_ERROR(prog->CopyInputs(named).WithContext(where));
  RunCtx ctx;
  ctx.stream = &stream_;
  ctx.threads = engine_.threads();
  ctx.subgraphs = this;
  SP_RETURN_IF_ERROR(prog->RunSteps(ctx).WithContext(where));
  SP_ASSIGN_OR_RETURN(*outputs, prog->CollectOutputs());
  taken_.fetch_add(1);
  return true;
}

}  // namespace sampan::cpu
