#include "backends/cpu/cpu_engine.h"

#include <chrono>
#include <exception>
#include <thread>

#include "backends/cpu/isa.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/threads.h"

namespace sampan::cpu {

Result<std::unique_ptr<CpuEngine>> CpuEngine::Create(const plan::Plan& plan, const runtime::EngineOptions& options) {
  if (!plan.graph) return InvalidArgument("the plan has no graph");
  if (options.threads < 0) return InvalidArgument("threads must be >= 0, got ", options.threads);
  SP_RETURN_IF_ERROR(CheckIsa());
  SP_RETURN_IF_ERROR(ApplyIsaToOneDnn());
  std::unique_ptr<CpuEngine> e(new CpuEngine());
  e->graph_ = plan.graph;
  e->threads_ = options.threads > 0 ? options.threads : AvailableCores();
  for (const auto& [name, choice] : plan.choices) {
    if (!choice.tactic.family.empty()) e->tactics_[name] = choice.tactic.family;
    if (choice.tactic.algo >= 0) e->algos_[name] = choice.tactic.algo;
    if (choice.precision == "bf16") e->bf16_nodes_.insert(name);
  }
  try {
    e->eng_ = dnnl::engine(dnnl::engine::kind::cpu, 0);
  } catch (const dnnl::error& err) {
    return Unavailable("oneDNN has no CPU engine: ", err.what());
  }
  // Weights are reordered once, here, when the input shapes are fixed: preparing
  // a program fills the engine's weight cache, which every context then shares.
  bool all_static = true;
  std::map<std::string, Tensor> probe;
  for (const ir::Value* in : plan.graph->inputs()) {
    if (!in->type.is_static()) {
      all_static = false;
      break;
    }
    SP_ASSIGN_OR_RETURN(probe[in->name()], Tensor::Zeros(in->type.dtype, in->type.static_shape()));
  }
  if (all_static) {
    PrepareOptions po;
    po.tactics = &e->tactics_;
    po.algos = &e->algos_;
    po.bf16_nodes = &e->bf16_nodes_;
    po.threads = e->threads_;
    // On a thread of its own: OpenMP keeps a team per thread that ran a parallel region, and
    // libgomp cuts the idle spin of every worker to almost nothing once it manages more threads
    // than there are CPUs. A team left on the loading thread (the weight reorders and Winograd
    // timing run in parallel) would make every later inference thread's workers sleep between
    // steps and wake by futex (MobileNetV2 b1, 2 threads: 8.4 ms instead of 6.3). The team
    // goes when this thread ends.
    // What Prepare throws (std::bad_alloc, a oneDNN error) is rethrown here, as if it ran here.
    Status prepared;
    std::exception_ptr thrown;
    std::thread([&] {
      try {
        prepared = Program::Prepare(*plan.graph, probe, e->eng_, e->weights_, po).status();
      } catch (...) {
        thrown = std::current_exception();
      }
    }).join();
    if (thrown) std::rethrow_exception(thrown);
    SP_RETURN_IF_ERROR(prepared);
  }
  return e;
}

std::string CpuEngine::Describe() const {
  return "CPU " + IsaSummary() + ", " + std::to_string(threads_) + " threads";
}

runtime::MemoryReport CpuEngine::MemoryUsage() const {
  runtime::MemoryReport r;
  r.Add(runtime::MemoryKind::kWeights, runtime::MemoryPlace::kHost, 0, weights_.bytes());
  return r;
}

runtime::MemoryReport CpuContext::MemoryUsage() const {
  runtime::MemoryReport r = memory_.Snapshot();
  r.Add(subgraphs_.MemoryUsage());
  return r;
}

Result<std::unique_ptr<runtime::ContextImpl>> CpuEngine::CreateContext() {
  try {
    return std::unique_ptr<runtime::ContextImpl>(std::make_unique<CpuContext>(*this));
  } catch (const dnnl::error& err) {
    return Internal("oneDNN stream creation failed: ", err.what());
  }
}

CpuContext::CpuContext(CpuEngine& engine)
    : engine_(engine), stream_(engine.engine()), fallback_(engine.graph()), subgraphs_(engine, stream_) {}

Result<Program*> CpuContext::ProgramFor(const std::map<std::string, Tensor>& inputs) {
  const auto& graph_inputs = engine_.graph()->inputs();
  for (auto& [key, prog] : programs_) {
    bool same = key.size() == graph_inputs.size();
    for (size_t i = 0; same && i < key.size(); ++i) {
      auto it = inputs.find(graph_inputs[i]->name());
      same = it != inputs.end() && it->second.shape() == key[i];
    }
    if (same) return prog->dynamic() ? nullptr : prog.get();
  }
  SP_RETURN_IF_ERROR(fallback_.ValidateInputs(inputs));
  std::vector<Shape> key;
  for (const ir::Value* in : graph_inputs) key.push_back(inputs.at(in->name()).shape());
  PrepareOptions po;
  po.tactics = &engine_.tactics();
  po.algos = &engine_.algos();
  po.bf16_nodes = &engine_.bf16_nodes();
  po.threads = engine_.threads();
  SP_ASSIGN_OR_RETURN(auto prog, Program::Prepare(*engine_.graph(), inputs, engine_.engine(), engine_.weights(), po));
  memory_.Add(runtime::MemoryKind::kArena, runtime::MemoryPlace::kHost, 0, prog->arena_allocated_bytes());
  memory_.Add(runtime::MemoryKind::kFolded, runtime::MemoryPlace::kHost, 0, prog->folded_bytes());
  programs_.emplace_back(std::move(key), std::move(prog));
  return programs_.back().second->dynamic() ? nullptr : programs_.back().second.get();
}

Status CpuContext::RunSteps(Program& program) {
  RunCtx ctx;
  ctx.stream = &stream_;
  ctx.threads = engine_.threads();
  ctx.subgraphs = &subgraphs_;
  return program.RunSteps(ctx);
}

Status CpuContext::RunStepForTest(Program& program, size_t i) {
  RunCtx ctx;
  ctx.stream = &stream_;
  ctx.threads = engine_.threads();
  ctx.subgraphs = &subgraphs_;
  return program.RunStep(i, ctx);
}

Result<std::vector<Tensor>> CpuContext::Run(const std::map<std::string, Tensor>& inputs, runtime::Timing* timing) {
  auto t0 = std::chrono::steady_clock::now();
  SP_ASSIGN_OR_RETURN(Program * prog, ProgramFor(inputs));
  std::vector<Tensor> outputs;
  if (prog == nullptr) {
    // Shapes that depend on data (NonZero, a Loop's trip count, ...): no static plan; the
    // reference executor runs it, with the subgraphs of its control-flow nodes on this
    // backend's kernels.
    ops::ScopedSubgraphExecutor subgraphs(&subgraphs_);
    SP_ASSIGN_OR_RETURN(outputs, fallback_.Run(inputs));
  } else {
    for (const ir::Value* in : engine_.graph()->inputs()) {
      auto it = inputs.find(in->name());
      if (it != inputs.end() && it->second.dtype() != in->type.dtype)
        return InvalidArgument("input '", in->name(), "' must be ", DTypeName(in->type.dtype), ", got ",
                               DTypeName(it->second.dtype()));
    }
    SP_RETURN_IF_ERROR(prog->CopyInputs(inputs));
    SP_RETURN_IF_ERROR(RunSteps(*prog));
    SP_ASSIGN_OR_RETURN(outputs, prog->CollectOutputs());
  }
  if (timing)
    timing->compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return outputs;
}

}  // namespace sampan::cpu
