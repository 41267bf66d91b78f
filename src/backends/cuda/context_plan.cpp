// CudaContext (context.h): planning a shape bucket (kernels, device arena, uploads,
// staging) and running its steps; the run path around it is in context.cpp.
#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "backends/cuda/context_bucket.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/layout.h"
#include "backends/cuda/subgraph_executor.h"
#include "ops/op.h"
#include "ops/run_node.h"
#include "runtime/memory_planner.h"
#include "runtime/plan_walk.h"

namespace sampan::cuda {

namespace {
// The channels-last values the builder decided (plan::Tactic::nhwc of their producers);
// a plan without recorded kernels (not lowered by the cuda builder) decides now, the
// same way (layout.h).
std::unordered_set<const ir::Value*> ChannelsLastOf(const plan::Plan& p) {
  bool recorded = false;
  std::unordered_set<const ir::Value*> s;
  for (const auto& np : p.graph->nodes()) {
    auto it = p.choices.find(np->name);
    if (it == p.choices.end() || it->second.tactic.family.empty()) continue;
    recorded = true;
    if (it->second.tactic.nhwc && np->num_outputs() > 0 && np->output(0)) s.insert(np->output(0));
  }
  return recorded ? s : ChannelsLastValues(*p.graph);
}
}  // namespace

Status CudaContext::EnsureWorkspace(size_t bytes) {
  if (bytes <= workspace_bytes_) return Status::Ok();
  if (workspace_) {
    SP_CUDA(cudaStreamSynchronize(stream_));
    SP_CUDA(cudaFree(workspace_));
    workspace_ = nullptr;
  }
  memory_.Remove(runtime::MemoryKind::kWorkspace, runtime::MemoryPlace::kDevice, device(), workspace_bytes_);
  workspace_bytes_ = 0;
  SP_CUDA(cudaMalloc(&workspace_, bytes));
  workspace_bytes_ = bytes;
  memory_.Add(runtime::MemoryKind::kWorkspace, runtime::MemoryPlace::kDevice, device(), bytes);
  // CUDA graphs captured earlier point at the old workspace.
  for (auto& [k, b] : buckets_)
    if (b->graph) {
      cudaGraphExecDestroy(b->graph);
      b->graph = nullptr;
    }
  return Status::Ok();
}

Result<std::unique_ptr<CudaContext::Bucket>> CudaContext::Plan(const std::map<std::string, Tensor>& inputs,
                                                               bool channels_last, bool allocate) {
  const ir::Graph& g = *engine_->plan().graph;
  auto b = std::make_unique<Bucket>();
  std::unordered_set<const ir::Value*> nhwc;
  if (channels_last) nhwc = ChannelsLastOf(engine_->plan());
  b->stats.channels_last_values = nhwc.size();
  // A channels-last value must be written and read by device kernels (host kernels see NCHW).
  auto touches_nhwc = [&](const ir::Node& node) {
    for (const ir::Value* v : node.inputs())
      if (v && nhwc.count(v)) return true;
    for (const ir::Value* v : node.outputs())
      if (v && nhwc.count(v)) return true;
    return false;
  };
  using Val = Bucket::Val;
  RunEnv env{stream_, lt_, dnn_, workspace_, workspace_bytes_, bad_index_};
  size_t need_ws = 0;
  // Whether these are the shapes the builder timed tactics at (see cuda/builder.cpp).
  bool at_tuned_shapes = true;
  if (!engine_->plan().profiles.empty()) {
    for (const auto& [name, range] : engine_->plan().profiles[0]) {
      auto it = inputs.find(name);
      if (it != inputs.end() && it->second.shape() != range.opt) at_tuned_shapes = false;
    }
  }
  // The shared planning walk (runtime/plan_walk.h) infers shapes and folds shape
  // arithmetic; this backend only lowers. A node touching a channels-last value without a
  // device kernel stops it and the bucket is planned again all NCHW.
  bool replan_nchw = false;
  auto lower = [&](const runtime::LowerRequest& r) -> Status {
    const ir::Node& node = r.node;
    std::vector<KernelInput> kin(node.num_inputs());
    for (size_t i = 0; i < r.inputs.size(); ++i)
      if (const runtime::PlanValue* v = r.inputs[i]) kin[i] = KernelInput{true, v->dtype, v->shape, v->known};
    std::vector<KernelOutput> kout(node.num_outputs());
    for (size_t k = 0; k < r.outputs.size(); ++k)
      if (const runtime::PlanValue* v = r.outputs[k]) kout[k] = KernelOutput{v->dtype, v->shape};
    const auto recorded = engine_->plan().choices.find(node.name);
    const plan::Tactic tactic = recorded == engine_->plan().choices.end() ? plan::Tactic{} : recorded->second.tactic;
    KernelOptions opt;
    opt.tf32 = tactic.tf32;  // the builder records it on f32 products it let use TF32
    // Algorithms were timed at profile 0's opt shapes; at other shapes (a batch-1 bucket
    // of a plan tuned at 128) the libraries' heuristic for the actual shape is the better
    // guess, so only the math mode is kept.
    opt.algo = at_tuned_shapes ? tactic.algo : -1;
    for (const ir::Value* v : node.inputs()) opt.in_nhwc.push_back(v && nhwc.count(v));
    opt.out_nhwc = node.num_outputs() > 0 && node.output(0) && nhwc.count(node.output(0));
    auto choice = MakeKernel(node, r.opset, kin, kout, opt, env);
    if (!choice.ok()) {
      if (choice.status().code() != StatusCode::kUnsupported) return choice.status();
      if (touches_nhwc(node)) {
        replan_nchw = true;
        return FailedPrecondition(node.Label(), ": a channels-last value without a device kernel");
      }
      // The builder's capability query said this node gets a device kernel at these
      // shapes (the ones it was asked at): a lowering that disagrees is a bug, not a
      // reason to fall back to the host quietly.
      const std::string& family = tactic.family;
      if (at_tuned_shapes && channels_last && !family.empty() && family != "host" && family != "folded")
        return Internal(node.Label(), ": the capability query chose '", tactic.ToString(),
                        "' but lowering answered: ", choice.status().message());
      return choice.status();  // the walk hands the node to `host`
    }
    Bucket::Step step;
    step.node = &node;
    step.kind = choice->view ? Bucket::Kind::kView : Bucket::Kind::kDevice;
    step.kernel = std::move(choice->kernel);
    if (step.kernel) {
      need_ws = std::max(need_ws, step.kernel->workspace());
      ++b->stats.families[step.kernel->family()];
      ++b->stats.device_steps;
    } else {
      ++b->stats.view_steps;
    }
    b->steps.push_back(std::move(step));
    return Status::Ok();
  };
  auto host = [&](const runtime::LowerRequest& r) -> Status {
    Bucket::Step step;
    step.node = &r.node;
    step.kind = Bucket::Kind::kHost;
    b->host_steps = true;
    ++b->stats.host_steps;
    ++b->stats.families["host " + r.node.op_type];
    b->steps.push_back(std::move(step));
    return Status::Ok();
  };
  auto walked = runtime::WalkPlan(g, runtime::ConcreteTypesOf(inputs), lower, host);
  if (replan_nchw) return Plan(inputs, false, allocate);
  if (!walked.ok()) return walked.status();
  runtime::PlanWalk& walk = *walked;
  if (walk.dynamic) {
    // A shape that depends on data computed on the device: this bucket runs on the host.
    b->whole_graph_on_host = true;
    b->stats.whole_graph_on_host = true;
    b->stats.host_reason = walk.dynamic_reason;
    return b;
  }
  for (const runtime::WalkedNode& wn : walk.nodes)
    if (wn.fate == runtime::NodeFate::kFolded && touches_nhwc(*wn.node)) return Plan(inputs, false, allocate);
  b->stats.folded_steps = walk.count(runtime::NodeFate::kFolded);
  // Every value the walk saw: known ones (constants, shape arithmetic) are planned host
  // values, the rest lives on the device.
  for (const auto& [v, pv] : walk.values) {
    Val val;
    val.dtype = pv.dtype;
    val.shape = pv.shape;
    val.object = IsObjectDType(pv.dtype);
    if (val.object) {
      if (pv.known) {
        val.host = *pv.known;
        val.planned = true;
      }
    } else if (pv.known) {
      val.host = *pv.known;
      val.planned = true;
      if (v->is_constant()) {
        val.dev = engine_->weight(v);
        val.device = val.dev != nullptr || v->data.nbytes() == 0;
      }
    } else {
      val.device = true;
    }
    b->vals[v] = val;
  }

  // Device memory: planned host values read on the device get their own buffer.
  using runtime::MemoryKind;
  using runtime::MemoryPlace;
  const int dev = device();
  auto upload = [&](const ir::Value* v, Val& val) -> Status {
    if (val.device || !val.planned) return Status::Ok();
    b->memory.Add(MemoryKind::kFolded, MemoryPlace::kDevice, dev, std::max<size_t>(val.bytes(), 1));
    if (!allocate) {
      val.device = true;
      return Status::Ok();
    }
    void* p = nullptr;
    SP_CUDA(cudaMalloc(&p, std::max<size_t>(val.bytes(), 1)));
    b->dedicated.push_back(p);
    if (val.bytes() > 0) SP_CUDA(cudaMemcpy(p, val.host.raw(), val.bytes(), cudaMemcpyHostToDevice));
    val.dev = p;
    val.device = true;
    return Status::Ok();
  };
  // Lifetimes over the steps (runtime/plan_walk.h): a view step's output is input 0's memory.
  std::vector<runtime::StepMemory> mem;
  for (size_t s = 0; s < b->steps.size(); ++s) {
    const auto& st = b->steps[s];
    if (st.kind != Bucket::Kind::kHost)
      for (const ir::Value* v : st.node->inputs())
        if (v) SP_RETURN_IF_ERROR(upload(v, b->vals[v]));
    runtime::StepMemory m{st.node, {}};
    if (st.kind == Bucket::Kind::kView) m.view_of = {0};
    mem.push_back(std::move(m));
  }
  const runtime::Lifetimes life = runtime::ComputeLifetimes(g, mem);
  const runtime::ArenaRequest req = runtime::ArenaBlocksFor(life, [&](const ir::Value* v) -> std::optional<size_t> {
    const Val& val = b->vals[v];
    if (val.object) return std::nullopt;  // host memory only
    return val.bytes();
  });
  const runtime::ArenaLayout layout = runtime::PlanArena(req.blocks, kArenaAlign);
  b->arena_bytes = layout.total;
  b->memory.Add(MemoryKind::kArena, MemoryPlace::kDevice, dev, std::max<size_t>(layout.total, kArenaAlign));
  if (allocate) {
    SP_CUDA(cudaMalloc(&b->arena, std::max<size_t>(layout.total, kArenaAlign)));
    for (size_t i = 0; i < req.values.size(); ++i)
      b->vals[req.values[i]].dev = static_cast<char*>(b->arena) + layout.offsets[i];
  }
  for (const auto& st : b->steps)
    if (st.kind == Bucket::Kind::kView) {
      const ir::Value* root = life.RootOf(st.node->output(0));
      Val& src = b->vals[root];
      if (!src.device) SP_RETURN_IF_ERROR(upload(root, src));
      b->vals[st.node->output(0)].dev = src.dev;
    }
  for (const auto& st : b->steps)
    if (st.kernel) b->memory.Add(MemoryKind::kKernel, MemoryPlace::kDevice, dev, st.kernel->device_bytes());
  // Pinned staging for inputs and outputs.
  for (const ir::Value* v : g.inputs())
    b->memory.Add(MemoryKind::kStaging, MemoryPlace::kPinnedHost, 0, std::max<size_t>(b->vals[v].bytes(), 1));
  for (const ir::Value* v : g.outputs())
    b->memory.Add(MemoryKind::kStaging, MemoryPlace::kPinnedHost, 0, std::max<size_t>(b->vals[v].bytes(), 1));
  b->workspace_need = need_ws;
  b->stats.arena_bytes = b->arena_bytes;
  if (!allocate) return b;
  SP_RETURN_IF_ERROR(EnsureWorkspace(need_ws));
  for (const ir::Value* in : g.inputs()) {
    void* p = nullptr;
    SP_CUDA(cudaHostAlloc(&p, std::max<size_t>(b->vals[in].bytes(), 1), cudaHostAllocDefault));
    b->in_pinned.push_back(p);
  }
  for (const ir::Value* out : g.outputs()) {
    void* p = nullptr;
    SP_CUDA(cudaHostAlloc(&p, std::max<size_t>(b->vals[out].bytes(), 1), cudaHostAllocDefault));
    b->out_pinned.push_back(p);
  }
  return b;
}

Status CudaContext::RunSteps(Bucket& b) {
  const ir::Graph& g = *engine_->plan().graph;
  RunEnv env{stream_, lt_, dnn_, workspace_, workspace_bytes_, bad_index_};
  std::vector<const void*> in;
  std::vector<void*> out;
  for (auto& st : b.steps) {
    const ir::Node& node = *st.node;
    if (st.kind == Bucket::Kind::kView) continue;
    if (st.kind == Bucket::Kind::kDevice) {
      in.clear();
      out.clear();
      for (const ir::Value* v : node.inputs()) in.push_back(v ? b.vals[v].dev : nullptr);
      for (const ir::Value* v : node.outputs()) out.push_back(v ? b.vals[v].dev : nullptr);
      if (ProfileSteps()) {
        if (!st.prof_start) SP_CUDA(cudaEventCreate(&st.prof_start));
        if (!st.prof_stop) SP_CUDA(cudaEventCreate(&st.prof_stop));
        SP_CUDA(cudaEventRecord(st.prof_start, stream_));
      }
      Status s = st.kernel->Run(env, in, out);
      if (!s.ok()) return s.WithContext(node.Label());
      if (ProfileSteps()) SP_CUDA(cudaEventRecord(st.prof_stop, stream_));
      continue;
    }
    // Host step: bring inputs down, run the reference kernel, send outputs up.
    std::vector<Tensor> host_in(node.num_inputs());
    std::vector<const Tensor*> args(node.num_inputs(), nullptr);
    SP_CUDA(cudaStreamSynchronize(stream_));
    for (size_t i = 0; i < node.num_inputs(); ++i) {
      const ir::Value* v = node.input(i);
      if (!v) continue;
      Bucket::Val& val = b.vals[v];
      if (val.planned || val.object) {
        args[i] = &val.host;
        continue;
      }
      host_in[i] = Tensor::Alloc(val.dtype, val.shape);
      if (val.bytes() > 0) SP_CUDA(cudaMemcpy(host_in[i].mutable_raw(), val.dev, val.bytes(), cudaMemcpyDeviceToHost));
      args[i] = &host_in[i];
    }
    std::vector<Tensor> outs;
    ops::ScopedSubgraphExecutor subgraphs(subgraphs_.get());
    Status s = ops::RunNode(node, g.opset(), args, &outs);
    if (!s.ok()) return s;
    for (size_t k = 0; k < node.num_outputs(); ++k) {
      const ir::Value* v = node.output(k);
      if (!v) continue;
      Bucket::Val& val = b.vals[v];
      if (outs[k].shape() != val.shape || outs[k].dtype() != val.dtype)
        return Internal(node.Label(), ": host kernel produced ", outs[k].Describe(), ", planned ", DTypeName(val.dtype),
                        ShapeToString(val.shape));
      if (val.object) {
        val.host = std::move(outs[k]);
        continue;
      }
      if (val.bytes() > 0)
        SP_CUDA(cudaMemcpyAsync(val.dev, outs[k].raw(), val.bytes(), cudaMemcpyHostToDevice, stream_));
      SP_CUDA(cudaStreamSynchronize(stream_));  // `outs` is pageable and goes away
    }
  }
  return Status::Ok();
}

}  // namespace sampan::cuda
