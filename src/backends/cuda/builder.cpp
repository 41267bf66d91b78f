// The "cuda" BackendBuilder: assigns every node a kernel family, and for
// convolutions and matrix products times the candidate algorithms (cuDNN's
// heuristic list, cuBLASLt's) at the graph's shapes, keeping the fastest in
// plan.choices[node].tactic ("cudnn conv algo=1 tf32"). Measurements are kept in
// the timing cache keyed by device + library versions and layer signature.
#include <algorithm>
#include <chrono>
#include <optional>
#include <random>

#include "backends/cuda/capability.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device.h"
#include "backends/cuda/fill.h"
#include "backends/cuda/layout.h"
#include "backends/cuda/node_kernel.h"
#include "backends/cuda/timing_cache.h"
#include "builder/backend_builder.h"
#include "ops/op.h"
#include "ops/run_node.h"
#include "passes/pass.h"
#include "plan/plan.h"

namespace sampan::cuda {
namespace {

bool IsProduct(const std::string& family) {
  return family == "cudnn conv" || family == "cudnn deconv" || family == "cublaslt gemm" ||
         family == "cublaslt fp8 gemm" || family == "attention" || family == "conv+pool";
}
// Families whose kernels offer tactics (Candidates()) the builder times.
bool IsTuned(const std::string& family) {
  return family == "cudnn conv" || family == "cudnn deconv" || family == "cublaslt gemm" ||
         family == "cublaslt fp8 gemm" || family == "attention" || family == "conv+pool";
}

// The op, attributes, input types and shapes: what makes two layers time alike.
std::string Signature(const ir::Node& n, bool tf32) {
  std::string s = n.domain.empty() ? n.op_type : n.domain + "." + n.op_type;
  for (const ir::Value* v : n.inputs()) {
    s += ' ';
    s += v ? v->type.ToString() : std::string("-");
  }
  for (const auto& [k, a] : n.attrs) {
    s += " " + k + "=";
    if (a.type == ir::AttrType::kInt)
      s += std::to_string(a.i);
    else if (a.type == ir::AttrType::kFloat)
      s += std::to_string(a.f);
    else if (a.type == ir::AttrType::kString)
      s += a.s;
    else if (a.type == ir::AttrType::kInts)
      for (int64_t x : a.ints) s += std::to_string(x) + ",";
    else if (a.type == ir::AttrType::kFloats)
      for (float x : a.floats) s += std::to_string(x) + ",";
  }
  if (tf32) s += " tf32";
  return s;
}

// Device scratch for timing one node: random inputs in [-1, 1] of the node's types.
class TuneBuffers {
 public:
  ~TuneBuffers() {
    for (void* p : bufs_) cudaFree(p);
  }
  Result<void*> Random(const ir::Value* v, DType dt, const Shape& shape) {
    // Real weights where the plan has them; float activations made on the device.
    if (v && v->is_constant()) return Copy(v->data);
    if (dt == DType::kFloat32 || dt == DType::kFloat16 || dt == DType::kBFloat16) {
      const int64_t n = NumElements(shape);
      void* d = nullptr;
      SP_CUDA(cudaMalloc(&d, std::max<size_t>(static_cast<size_t>(n) * DTypeSize(dt), 1)));
      bufs_.push_back(d);
      const FloatType ft = dt == DType::kFloat32   ? FloatType::kF32
                           : dt == DType::kFloat16 ? FloatType::kF16
                                                   : FloatType::kBF16;
      SP_CUDA(LaunchFillUniform(ft, d, n, 1234 + 7919 * bufs_.size(), -1.f, 1.f, nullptr));
      SP_CUDA(cudaStreamSynchronize(nullptr));  // the tuner's stream does not wait for the legacy stream
      return d;
    }
    Tensor f = Tensor::Alloc(DType::kFloat32, shape);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    float* p = f.mutable_data<float>();
    for (int64_t i = 0; i < f.numel(); ++i) p[i] = u(rng_);
    Tensor t = f;
    if (dt != DType::kFloat32) {
      auto c = CastTensor(f, dt);
      if (!c.ok()) return c.status();
      t = *c;
    }
    return Copy(t);
  }
  Result<void*> Copy(const Tensor& t) {
    void* d = nullptr;
    SP_CUDA(cudaMalloc(&d, std::max<size_t>(t.nbytes(), 1)));
    bufs_.push_back(d);
    if (t.nbytes() > 0) SP_CUDA(cudaMemcpy(d, t.raw(), t.nbytes(), cudaMemcpyHostToDevice));
    return d;
  }
  Result<void*> Zeros(size_t bytes) {
    void* d = nullptr;
    SP_CUDA(cudaMalloc(&d, std::max<size_t>(bytes, 1)));
    bufs_.push_back(d);
    return d;
  }

 private:
  std::vector<void*> bufs_;
  std::mt19937 rng_{1234};
};

struct Tuner {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  cudnnHandle_t dnn = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Tuner() {
    if (workspace) cudaFree(workspace);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (dnn) cudnnDestroy(dnn);
    if (lt) cublasLtDestroy(lt);
    if (stream) cudaStreamDestroy(stream);
  }
  Status Init() {
    SP_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    SP_CUBLAS(cublasLtCreate(&lt));
    SP_CUDNN(cudnnCreate(&dnn));
    SP_CUDNN(cudnnSetStream(dnn, stream));
    SP_CUDA(cudaEventCreate(&start));
    SP_CUDA(cudaEventCreate(&stop));
    return Status::Ok();
  }
  Status Workspace(size_t bytes) {
    if (bytes <= workspace_bytes) return Status::Ok();
    if (workspace) SP_CUDA(cudaFree(workspace));
    workspace = nullptr;
    SP_CUDA(cudaMalloc(&workspace, bytes));
    workspace_bytes = bytes;
    return Status::Ok();
  }
  RunEnv env() const { return RunEnv{stream, lt, dnn, workspace, workspace_bytes, nullptr}; }

  // Device time of one run, in ms, after two warm-ups. The runs are captured in a
  // CUDA graph and replayed, as plans run: timed eagerly, a small layer measures the
  // library's host-side launch cost (tens of microseconds for a cuDNN call, more than
  // the kernel itself at batch 1) and every candidate looks alike. Median of three
  // replays of `reps` back-to-back runs; eager timing when the kernel cannot be captured.
  Result<double> Time(NodeKernel& k, const std::vector<const void*>& in, const std::vector<void*>& out, int reps) {
    SP_RETURN_IF_ERROR(Workspace(k.workspace()));
    const RunEnv e = env();
    for (int i = 0; i < 2; ++i) SP_RETURN_IF_ERROR(k.Run(e, in, out));
    if (auto graphed = TimeGraph(k, e, in, out, reps); graphed.ok()) return graphed;
    cudaGetLastError();
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
      SP_CUDA(cudaEventRecord(start, stream));
      SP_RETURN_IF_ERROR(k.Run(e, in, out));
      SP_CUDA(cudaEventRecord(stop, stream));
      SP_CUDA(cudaEventSynchronize(stop));
      float t = 0;
      SP_CUDA(cudaEventElapsedTime(&t, start, stop));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return static_cast<double>(ms[ms.size() / 2]);
  }

  Result<double> TimeGraph(NodeKernel& k, const RunEnv& e, const std::vector<const void*>& in,
                           const std::vector<void*>& out, int reps) {
    SP_CUDA(cudaStreamSynchronize(stream));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    SP_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    Status captured = Status::Ok();
    for (int i = 0; i < reps && captured.ok(); ++i) captured = k.Run(e, in, out);
    cudaError_t err = cudaStreamEndCapture(stream, &graph);
    if (captured.ok() && err == cudaSuccess) err = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    struct ExecGuard {
      cudaGraphExec_t g;
      ~ExecGuard() {
        if (g) cudaGraphExecDestroy(g);
      }
    } guard{exec};
    SP_RETURN_IF_ERROR(captured);
    SP_CUDA(err);
    SP_CUDA(cudaGraphLaunch(exec, stream));  // upload and warm
    std::vector<float> ms;
    for (int round = 0; round < 3; ++round) {
      SP_CUDA(cudaEventRecord(start, stream));
      SP_CUDA(cudaGraphLaunch(exec, stream));
      SP_CUDA(cudaEventRecord(stop, stream));
      SP_CUDA(cudaEventSynchronize(stop));
      float t = 0;
      SP_CUDA(cudaEventElapsedTime(&t, start, stop));
      ms.push_back(t / static_cast<float>(reps));
    }
    std::sort(ms.begin(), ms.end());
    return static_cast<double>(ms[1]);
  }
};

// A plan with dynamic shapes is tuned at its first profile's opt shapes (as
// TensorRT does): a copy of the graph with the inputs pinned there and the shape
// arithmetic folded, so every product has static shapes. Tactics map back by
// node name (the builder makes names unique).
Result<plan::Plan> PinnedToOpt(const plan::Plan& plan) {
  // A deep copy (subgraphs too; the plan file cannot hold those yet).
  plan::Plan copy = plan;
  copy.graph = std::shared_ptr<ir::Graph>(plan.graph->Clone());
  ir::Graph& g = *copy.graph;
  for (const auto& [name, r] : plan.profiles[0]) {
    ir::Value* v = g.FindValue(name);
    if (v == nullptr) return Internal("tuning copy: no input '", name, "'");
    ir::Dims dims;
    for (int64_t d : r.opt) dims.push_back(ir::Dim::Known(d));
    v->type.dims = dims;
  }
  SP_RETURN_IF_ERROR(ops::InferTypes(g));
  passes::PassContext ctx;
  for (const char* name : {"constant_folding", "dead_node_elimination"}) {
    const passes::PassDef* pass = passes::FindPass(name);
    if (pass == nullptr) return Internal("tuning copy: pass ", name, " is not registered");
    SP_RETURN_IF_ERROR(pass->run(g, ctx).status());
    SP_RETURN_IF_ERROR(ops::InferTypes(g));
  }
  return copy;
}

bool HasDynamicProducts(const ir::Graph& g) {
  for (const auto& np : g.nodes()) {
    if (!IsProduct(StaticKernelFamily(*np))) continue;
    for (const ir::Value* v : np->inputs())
      if (v && !v->type.is_static()) return true;
    for (const ir::Value* v : np->outputs())
      if (v && !v->type.is_static()) return true;
  }
  return false;
}

struct TuneResult {
  std::map<std::string, plan::Tactic> tactics;  // node name -> tactic
  size_t tuned = 0, cached = 0;
};

// Times the candidates of every convolution (stems with their pool too), matrix product
// and attention of `g` whose shapes are static, keeping the fastest (or the timing
// cache's record).
Status TuneProducts(const ir::Graph& g, const builder::BuildConfig& config, const plan::Plan& plan, int reps,
                    TimingCache& cache, const std::string& device_key, Tuner& tuner, builder::BuildReport& report,
                    TuneResult* result) {
  const auto nhwc = ChannelsLastValues(g);
  size_t total = 0, done = 0;
  for (const auto& np : g.nodes()) {
    const std::string f = StaticKernelFamily(*np);
    total += IsTuned(f);
  }
  for (const auto& np : g.nodes()) {
    const ir::Node& n = *np;
    const std::string family = StaticKernelFamily(n);
    if (!IsTuned(family)) continue;
    ++done;
    const auto layer_t0 = std::chrono::steady_clock::now();
    if (config.progress) config.progress(StrCat("timing tactics, layer ", done, "/", total, ": ", n.Label()));
    const auto pc = plan.choices.find(n.name);
    const std::string precision = pc == plan.choices.end() ? "" : pc->second.precision;
    const bool tf32 = config.precision == builder::Precision::kTF32 || (config.allow_tf32 && precision == "fp32");
    bool shapes_static = true;
    for (const ir::Value* v : n.inputs()) shapes_static = shapes_static && (!v || v->type.is_static());
    for (const ir::Value* v : n.outputs()) shapes_static = shapes_static && (!v || v->type.is_static());
    if (!shapes_static) continue;
    std::string sig = Signature(n, tf32);
    // Channels-last storage changes the kernels, so it is part of the layer's signature.
    for (const ir::Value* v : n.inputs()) sig += v && nhwc.count(v) ? " nhwc" : "";
    if (n.num_outputs() > 0 && nhwc.count(n.output(0))) sig += " ->nhwc";
    // A workspace limit (--workspace) narrows the candidates, so it is part of the signature too.
    if (config.workspace_bytes > 0) sig += StrCat(" ws<=", config.workspace_bytes);
    if (const TimingCache::Entry* e = cache.Find(device_key, sig)) {
      // A record of another family (or unreadable) is timed again and overwritten.
      auto t = plan::Tactic::Parse(e->tactic);
      if (t.ok() && t->family == family) {
        result->tactics[n.name] = *t;
        ++result->cached;
        continue;
      }
    }
    std::vector<KernelInput> kin;
    std::vector<KernelOutput> kout;
    for (const ir::Value* v : n.inputs()) {
      if (!v) {
        kin.push_back(KernelInput{});
        continue;
      }
      kin.push_back(KernelInput{true, v->type.dtype, v->type.static_shape(), v->is_constant() ? &v->data : nullptr});
    }
    for (const ir::Value* v : n.outputs())
      kout.push_back(v ? KernelOutput{v->type.dtype, v->type.static_shape()} : KernelOutput{});
    KernelOptions opt;
    opt.tf32 = tf32;
    for (const ir::Value* v : n.inputs()) opt.in_nhwc.push_back(v && nhwc.count(v));
    opt.out_nhwc = n.num_outputs() > 0 && n.output(0) && nhwc.count(n.output(0));
    auto choice = MakeKernel(n, g.opset(), kin, kout, opt, tuner.env());
    if (!choice.ok() || !choice->kernel) continue;
    NodeKernel& k = *choice->kernel;
    TuneBuffers bufs;
    std::vector<const void*> in;
    std::vector<void*> out;
    for (size_t i = 0; i < n.num_inputs(); ++i) {
      const ir::Value* v = n.input(i);
      if (!v) {
        in.push_back(nullptr);
        continue;
      }
      SP_ASSIGN_OR_RETURN(void* p, bufs.Random(v, v->type.dtype, v->type.static_shape()));
      in.push_back(p);
    }
    for (const ir::Value* v : n.outputs()) {
      SP_ASSIGN_OR_RETURN(void* p, bufs.Zeros(v ? DTypeBytes(v->type.dtype, NumElements(v->type.static_shape())) : 0));
      out.push_back(p);
    }
    // Where a layer's build time goes: making the kernel (MakeKernel: library heuristics, cuDNN
    // graph engines), selecting candidates (execution plans finalized), timing them.
    using Clock = std::chrono::steady_clock;
    auto since_ms = [](Clock::time_point t) {
      return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
    };
    const double make_ms = since_ms(layer_t0);
    double select_ms = 0, time_ms = 0;
    int best = -1;
    double best_ms = 0;
    // Best time per kind of candidate: library algorithms (< 1000) and cuDNN graph
    // configurations (>= 1000, conv_graph.h), for the build report.
    double best_legacy = -1, best_graph = -1;
    size_t over_limit = 0, least_over = 0;
    for (int cand : k.Candidates()) {
      const auto select_t0 = Clock::now();
      const bool selected = k.Select(cand).ok();
      select_ms += since_ms(select_t0);
      if (!selected) continue;
      if (config.workspace_bytes > 0 && k.workspace() > config.workspace_bytes) {  // TensorRT's memPoolSize
        least_over = over_limit++ == 0 ? k.workspace() : std::min(least_over, k.workspace());
        continue;
      }
      const auto time_t0 = Clock::now();
      auto ms = tuner.Time(k, in, out, reps);
      time_ms += since_ms(time_t0);
      if (!ms.ok()) {
        cudaGetLastError();
        continue;
      }
      double& kind_best = cand >= 1000 ? best_graph : best_legacy;
      if (kind_best < 0 || *ms < kind_best) kind_best = *ms;
      if (best < 0 || *ms < best_ms) {
        best = cand;
        best_ms = *ms;
      }
    }
    if (best < 0 && over_limit > 0)
      return InvalidArgument(n.Label(), ": every tactic needs more device workspace than --workspace allows (",
                             config.workspace_bytes, " bytes; the smallest of them needs ", least_over, ")");
    if (best < 0) continue;
    const plan::Tactic tactic{family, best, tf32};
    cache.Put(device_key, sig, TimingCache::Entry{tactic.ToString(), best_ms});
    result->tactics[n.name] = tactic;
    ++result->tuned;
    report.backend_notes.push_back(StrCat(
        n.Label(), ": ", tactic.ToString(), " (", best_ms, " ms of ", k.Candidates().size(), " candidates, timed in ",
        since_ms(layer_t0), " ms: make ", make_ms, ", select ", select_ms, ", time ", time_ms,
        best_graph >= 0 ? StrCat("; best library algorithm ", best_legacy, " ms, best cuDNN graph ", best_graph, " ms")
                        : std::string(),
        ")"));
  }
  return Status::Ok();
}

// The backend's own rewrites (its lowering passes, kLowering in passes/pass_manager.cpp:
// switched off with --disable-pass, timed, verified and dumped like the shared pipeline's);
// kernels are then chosen (and tuned) for the rewritten graph. `cc_major` is the device's
// compute capability (the capability query without a device assumes the sm_90 the plans are
// built for).
Status Rewrite(plan::Plan& plan, int cc_major, const builder::BuildConfig& config, builder::BuildReport& report) {
  passes::PassManagerOptions opts;
  opts.disabled = config.disabled_passes;
  opts.after_pass = [&](const std::string& name, const ir::Graph& g) {
    if (config.progress) config.progress(StrCat("pass ", name, " (", g.nodes().size(), " nodes)"));
    if (config.after_pass) config.after_pass(name, g);
  };
  passes::PassManager pm(opts);
  SP_RETURN_IF_ERROR(pm.RunLowering(*plan.graph, &plan, "cuda", cc_major));
  for (const passes::PassStats& st : pm.stats()) report.passes.push_back(st);
  for (const passes::Rewrite& r : pm.context().rewrites) report.rewrites.push_back(r);
  return Status::Ok();
}

// The capability query at the shapes the plan is tuned at (profile 0's opt shapes for
// a dynamic plan), recorded per node: plan.choices[].tactic gets the family, host nodes
// go to the report with their reason. Nodes the pinned copy folded away are shape
// arithmetic the runtime folds too.
Result<Capability> RecordCapability(plan::Plan& plan, const builder::BuildConfig& config,
                                    builder::BuildReport& report) {
  std::optional<plan::Plan> pinned;
  const bool dynamic = !plan.profiles.empty() && std::any_of(plan.graph->inputs().begin(), plan.graph->inputs().end(),
                                                             [](const ir::Value* v) { return !v->type.is_static(); });
  if (dynamic) {
    SP_ASSIGN_OR_RETURN(plan::Plan p, PinnedToOpt(plan));
    pinned = std::move(p);
  }
  SP_ASSIGN_OR_RETURN(Capability cap, QueryCapability(pinned ? *pinned->graph : *plan.graph));
  report.capability_checked = true;
  report.kernel_counts.clear();
  report.host_nodes.clear();
  // The layout each node's output gets (plan::Tactic::nhwc): the channels-last plan, unless
  // the query found a node touching it without a device kernel (then every value is NCHW).
  std::unordered_set<const ir::Value*> nhwc;
  if (cap.nhwc_blocker.empty()) nhwc = ChannelsLastValues(*plan.graph);
  for (const auto& np : plan.graph->nodes()) {
    const ir::Node& n = *np;
    auto it = cap.nodes.find(n.name);
    NodeSupport ns;
    if (it != cap.nodes.end()) {
      ns = it->second;
    } else {
      ns.where = NodeSupport::Where::kFolded;
      ns.family = "folded";
    }
    if (ns.where == NodeSupport::Where::kHost)
      report.host_nodes.push_back({n.Label(), n.domain.empty() ? n.op_type : n.domain + "::" + n.op_type, ns.reason});
    plan.choices[n.name].tactic = plan::Tactic{ns.family};
    plan.choices[n.name].tactic.nhwc = n.num_outputs() > 0 && nhwc.count(n.output(0));
    ++report.kernel_counts[ns.family];
  }
  if (!cap.nhwc_blocker.empty())
    report.backend_notes.push_back(StrCat("cuda: every activation stays NCHW: ", cap.nhwc_blocker,
                                          " touches a channels-last value and has no device kernel"));
  report.backend_notes.push_back(StrCat("cuda: ", cap.channels_last_values, " activations channels-last"));
  return cap;
}

Status QueryOnly(plan::Plan& plan, const builder::BuildConfig& config, builder::BuildReport& report) {
  SP_RETURN_IF_ERROR(Rewrite(plan, 9, config, report));
  return RecordCapability(plan, config, report).status();
}

Status Lower(plan::Plan& plan, const builder::BuildConfig& config, builder::BuildReport& report) {
  Status avail = CheckDevice(config.device);
  if (!avail.ok()) return avail.WithContext("backend 'cuda'");
  SP_CUDA(cudaSetDevice(config.device));
  const auto t0 = std::chrono::steady_clock::now();
  int cc_major = 0;
  SP_CUDA(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, config.device));
  SP_RETURN_IF_ERROR(Rewrite(plan, cc_major, config, report));
  if (config.progress) config.progress("capability query");
  SP_ASSIGN_OR_RETURN(Capability cap, RecordCapability(plan, config, report));
  SP_RETURN_IF_ERROR(builder::CheckStrict(config, report));  // before any timing
  const ir::Graph& g = *plan.graph;
  TimingCache cache;
  if (!config.timing_cache_file.empty()) SP_RETURN_IF_ERROR(cache.Load(config.timing_cache_file));
  // "t2": times from graph replay and cuDNN graph-API candidates; records made the
  // earlier way (eager timing, legacy algorithms only) are not reused.
  const std::string device_key = DeviceKey(config.device) + " t2";
  // Effort: level 0 takes the libraries' heuristic choice; higher levels time more repetitions.
  const int level = std::clamp(config.optimization_level, 0, 5);
  const int reps = level == 0 ? 0 : 3 + 4 * level;
  if (reps == 0 && config.workspace_bytes > 0)
    return InvalidArgument(
        "--workspace limits the tactics that are timed; at --builderOptimizationLevel 0 none are "
        "(use level 1 or more)");
  TuneResult tuned;
  std::string tuned_at = "the plan's shapes";
  if (reps > 0) {
    Tuner tuner;
    SP_RETURN_IF_ERROR(tuner.Init());
    if (HasDynamicProducts(g) && !plan.profiles.empty()) {
      SP_ASSIGN_OR_RETURN(plan::Plan pinned, PinnedToOpt(plan));
      SP_RETURN_IF_ERROR(TuneProducts(*pinned.graph, config, plan, reps, cache, device_key, tuner, report, &tuned)
                             .WithContext("tuning at the opt shapes of profile 0"));
      tuned_at = "profile 0's opt shapes";
    } else {
      SP_RETURN_IF_ERROR(TuneProducts(g, config, plan, reps, cache, device_key, tuner, report, &tuned));
    }
  }
  for (const auto& np : g.nodes()) {
    const ir::Node& n = *np;
    plan::NodeChoice& choice = plan.choices[n.name];
    const std::string family = choice.tactic.family;
    if (family == "host") {
      report.backend_notes.push_back(StrCat(n.Label(), ": reference kernel on the host"));
      continue;
    }
    const bool tf32 = IsProduct(family) && (config.precision == builder::Precision::kTF32 ||
                                            (config.allow_tf32 && choice.precision == "fp32"));
    if (auto t = tuned.tactics.find(n.name); t != tuned.tactics.end()) {
      choice.tactic.algo = t->second.algo;
      choice.tactic.tf32 = t->second.tf32;
    } else if (tf32) {
      choice.tactic.tf32 = true;
    }
  }
  if (!config.timing_cache_file.empty()) SP_RETURN_IF_ERROR(cache.Save(config.timing_cache_file));
  report.backend_notes.push_back(StrCat("cuda: ", tuned.tuned, " layers timed at ", tuned_at, ", ", tuned.cached,
                                        " from the timing cache, ", report.host_nodes.size(),
                                        " nodes on host kernels (level ", level, "), ", cap.channels_last_values,
                                        " activations channels-last"));
  report.tuning_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return Status::Ok();
}

builder::BackendBuilder MakeCudaBuilder() {
  builder::BackendBuilder b;
  b.name = "cuda";
  b.fingerprint = [](const builder::BuildConfig& config) { return DeviceFingerprint(config.device); };
  b.lower = Lower;
  b.capability = QueryOnly;
  b.runs_object_types = true;  // strings, sequences, optionals: host steps over host values (context.cpp)
  // FP8 products through cuBLASLt (gemm_kernel.cpp; sm_89 and newer, older GPUs answer Unsupported
  // node by node). Integer products: not yet, quantized weights fold to float.
  b.runs_fp8_products = true;
  return b;
}

}  // namespace
}  // namespace sampan::cuda

SAMPAN_REGISTER_BACKEND_BUILDER(cuda, ::sampan::cuda::MakeCudaBuilder)
