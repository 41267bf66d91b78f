#include "backends/cuda/subgraph_executor.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/context.h"
#include "ops/run_node.h"

namespace sampan::cuda {

std::atomic<uint64_t> CudaSubgraphExecutor::taken_{0};
std::atomic<uint64_t> CudaSubgraphExecutor::declined_{0};

CudaSubgraphExecutor::CudaSubgraphExecutor(const runtime::EngineOptions& options) : options_(options) {}

CudaSubgraphExecutor::~CudaSubgraphExecutor() {
  const char* e = std::getenv("SAMPAN_CUDA_PROFILE");
  if (e == nullptr || *e == 0 || std::strcmp(e, "0") == 0) return;
  for (const auto& [g, entry] : entries_)
    std::fprintf(stderr, "=== CUDA subgraph %s: %llu run(s) on CUDA kernels, %llu on the reference kernels%s%s\n",
                 entry.where.c_str(), static_cast<unsigned long long>(entry.taken),
                 static_cast<unsigned long long>(entry.declined), entry.why_declined.empty() ? "" : " (",
                 entry.why_declined.empty() ? "" : (entry.why_declined + ")").c_str());
}

runtime::MemoryReport CudaSubgraphExecutor::MemoryUsage() const {
  std::lock_guard<std::mutex> lock(mu_);
  runtime::MemoryReport r;
  for (const auto& [g, entry] : entries_)
    for (const auto& p : entry.programs) {
      r.Add(p->engine->MemoryUsage());
      r.Add(p->context->MemoryUsage());
    }
  return r;
}

Result<bool> CudaSubgraphExecutor::TryRun(const ir::Graph& graph, int64_t opset,
                                          const std::vector<const Tensor*>& inputs,
                                          const std::vector<const Tensor*>& captures, std::vector<Tensor>* outputs,
                                          const std::string& where) {
  Entry& e = [&]() -> Entry& {
    std::lock_guard<std::mutex> lock(mu_);  // MemoryUsage reads entries_ from other threads
    return entries_[&graph];
  }();
  if (e.where.empty()) e.where = where;
  auto decline = [&](const std::string& why = "") {
    declined_.fetch_add(1);
    ++e.declined;
    if (!why.empty()) e.why_declined = why;
    return false;
  };
  if (e.reference_only) return decline();
  std::vector<const Tensor*> bound = inputs;
  bound.insert(bound.end(), captures.begin(), captures.end());
  std::vector<DType> dtypes;
  std::vector<Shape> shapes;
  for (const Tensor* t : bound) {
    if (t == nullptr || !t->defined() || IsObjectDType(t->dtype())) {
      e.reference_only = t != nullptr && t->defined();  // strings and sequences stay with the reference kernels
      return decline(e.reference_only ? "a string, sequence or optional input" : "an input not given");
    }
    dtypes.push_back(t->dtype());
    shapes.push_back(t->shape());
  }
  if (!e.standalone) {
    // The subgraph as a graph of its own: captures become inputs after its inputs.
    std::shared_ptr<ir::Graph> g = graph.Clone();
    for (ir::Value* c : g->captures()) g->inputs().push_back(c);
    g->captures().clear();
    if (!g->opsets.count("")) g->opsets[""] = opset;
    e.standalone = std::move(g);
  }
  if (!e.signatures.count(shapes)) {
    if (e.signatures.size() >= kMaxSignatures) {
      // Shapes that keep changing: planning a bucket per iteration costs more than it saves.
      std::lock_guard<std::mutex> lock(mu_);
      e.programs.clear();
      e.signatures.clear();
      e.reference_only = true;
      return decline(StrCat("input shapes keep changing: more than ", kMaxSignatures));
    }
    e.signatures.insert(shapes);
  }
  // Small integer captures (an Unsqueeze's axes, a Reshape's shape, an index the enclosing graph
  // computed once) become constants of the program: the device plan needs their values to know
  // shapes. A program is made per set of their values (bounded like the shapes).
  std::vector<bool> embedded(bound.size(), false);
  std::string key;
  for (size_t i = 0; i < bound.size(); ++i) key += DTypeName(dtypes[i]) + std::string(",");
  for (size_t i = inputs.size(); i < bound.size(); ++i) {
    const Tensor& t = *bound[i];
    if ((t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32) || t.numel() > kMaxEmbeddedElements) continue;
    embedded[i] = true;
    key += StrCat("|", i, ":", ShapeToString(t.shape()), ":");
    key.append(static_cast<const char*>(t.raw()), t.nbytes());
  }
  Program* prog = nullptr;
  for (auto& p : e.programs)
    if (p->key == key) prog = p.get();
  if (prog == nullptr && e.programs.size() >= kMaxSignatures) {
    std::lock_guard<std::mutex> lock(mu_);
    e.programs.clear();
    e.signatures.clear();
    e.reference_only = true;
    return decline(StrCat("captured integer values keep changing: more than ", kMaxSignatures, " programs"));
  }
  if (prog == nullptr) {
    // Typed for these input types, shapes left open: the context plans a bucket per set of
    // input shapes, inferring every shape inside from them (a Loop's carried shapes may differ
    // from what the model declares for the body).
    std::shared_ptr<ir::Graph> typed = e.standalone->Clone();
    for (ir::Value* v : typed->values())
      if (!v->is_constant()) v->type = ir::TensorType{v->type.dtype, std::nullopt};
    std::vector<ir::Value*> kept;
    for (size_t i = 0; i < bound.size(); ++i) {
      ir::Value* in = typed->inputs()[i];
      if (embedded[i]) {
        in->data = bound[i]->Clone();
        in->type = ir::TensorType::Static(dtypes[i], bound[i]->shape());
      } else {
        in->type = ir::TensorType{dtypes[i], std::nullopt};
        kept.push_back(in);
      }
    }
    typed->inputs() = kept;
    Status inferred = ops::InferTypes(*typed);
    if (!inferred.ok()) {
      // The reference kernels run it and report what is wrong, if anything is.
      e.reference_only = true;
      return decline(StrCat("types not inferred: ", inferred.message()));
    }
    auto p = std::make_unique<Program>();
    p->key = key;
    p->embedded = embedded;
    p->plan.graph = std::move(typed);
    auto engine = CudaEngine::Create(p->plan, options_);
    if (!engine.ok()) return engine.status().WithContext(where);
    p->engine = std::move(engine).value();
    auto context = CudaContext::Create(p->engine.get());
    if (!context.ok()) return context.status().WithContext(where);
    p->context = std::move(context).value();
    std::lock_guard<std::mutex> lock(mu_);
    e.programs.push_back(std::move(p));
    prog = e.programs.back().get();
  }
  if (prog->host_buckets.count(shapes)) return decline();  // (the reason was noted at its first run)
  std::map<std::string, Tensor> named;
  for (size_t i = 0, k = 0; i < bound.size(); ++i)
    if (!prog->embedded[i]) named[prog->plan.graph->inputs()[k++]->name()] = *bound[i];
  runtime::Timing timing;
  auto ran = prog->context->Run(named, &timing);
  if (!ran.ok()) return ran.status().WithContext(where);
  *outputs = std::move(ran).value();
  if (prog->context->last_stats().whole_graph_on_host) {
    // Shapes that depend on data: this bucket ran on the reference kernels; later runs at these
    // shapes go there directly.
    prog->host_buckets.insert(shapes);
    decline(StrCat("its context runs it on the host: ", prog->context->last_stats().host_reason));
  } else {
    taken_.fetch_add(1);
    ++e.taken;
  }
  return true;
}

}  // namespace sampan::cuda
