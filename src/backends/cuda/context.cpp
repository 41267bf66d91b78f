#include "backends/cuda/context.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/context_bucket.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/device.h"
#include "backends/cuda/subgraph_executor.h"

namespace sampan::cuda {

// SAMPAN_CUDA_PROFILE=1: every device step is timed with events (no CUDA graph), and
// each context prints its per-node and per-family device time when it is destroyed.
// A bucket's first run is not counted (it loads every kernel's module on first use).
bool ProfileSteps() {
  static const bool on = [] {
    const char* e = std::getenv("SAMPAN_CUDA_PROFILE");
    return e && *e && std::strcmp(e, "0") != 0;
  }();
  return on;
}

// ---------------------------------------------------------------- context

Result<std::unique_ptr<CudaContext>> CudaContext::Create(CudaEngine* engine) {
  SP_CUDA(cudaSetDevice(engine->options().device));
  std::unique_ptr<CudaContext> c(new CudaContext(engine));
  SP_ASSIGN_OR_RETURN(const int priority, StreamPriorityValue(engine->options().stream_priority));
  SP_CUDA(cudaStreamCreateWithPriority(&c->stream_, cudaStreamNonBlocking, priority));
  SP_CUBLAS(cublasLtCreate(&c->lt_));
  SP_CUDNN(cudnnCreate(&c->dnn_));
  SP_CUDNN(cudnnSetStream(c->dnn_, c->stream_));
  SP_CUDA(cudaMalloc(reinterpret_cast<void**>(&c->bad_index_), sizeof(int)));
  SP_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&c->bad_index_host_), kFlights * sizeof(int), cudaHostAllocDefault));
  for (auto& slot : c->ev_)
    for (auto& e : slot) SP_CUDA(cudaEventCreate(&e));
  c->subgraphs_ = std::make_unique<CudaSubgraphExecutor>(engine->options());
  c->memory_.Add(runtime::MemoryKind::kWorkspace, runtime::MemoryPlace::kDevice, c->device(), sizeof(int));
  c->memory_.Add(runtime::MemoryKind::kStaging, runtime::MemoryPlace::kPinnedHost, 0, kFlights * sizeof(int));
  return c;
}

runtime::MemoryReport CudaContext::MemoryUsage() const {
  runtime::MemoryReport r = memory_.Snapshot();
  if (std::shared_ptr<PinnedPool> pool = std::atomic_load(&pinned_pool_)) {
    r.Add(runtime::MemoryKind::kStaging, runtime::MemoryPlace::kPinnedHost, 0,
          pool->outstanding_bytes() + pool->cached_bytes());
  }
  r.Add(subgraphs_->MemoryUsage());
  return r;
}

Result<runtime::MemoryReport> CudaContext::Estimate(const std::vector<std::map<std::string, Shape>>& shape_sets) {
  runtime::MemoryReport sum = memory_.Snapshot();  // the index flags
  size_t workspace = 0;
  const ir::Graph& g = *engine_->plan().graph;
  for (const auto& shapes : shape_sets) {
    // Planning reads the inputs' types and shapes only: shape-only tensors stand in for them.
    std::map<std::string, Tensor> inputs;
    for (const ir::Value* in : g.inputs()) {
      auto it = shapes.find(in->name());
      if (it == shapes.end())
        return InvalidArgument("estimating a context's memory: input '", in->name(), "' has no shape");
      inputs[in->name()] = Tensor::Wrap(in->type.dtype, it->second, nullptr, nullptr);
    }
    auto bucket = Plan(inputs, true, /*allocate=*/false);
    if (!bucket.ok()) {
      std::string text;
      for (const auto& [name, shape] : shapes)
        text += StrCat(text.empty() ? "" : ", ", name, " ", ShapeToString(shape));
      return bucket.status().WithContext(StrCat("estimating the memory of a context at ", text));
    }
    sum.Add((*bucket)->memory);
    workspace = std::max(workspace, (*bucket)->workspace_need);
  }
  sum.Add(runtime::MemoryKind::kWorkspace, runtime::MemoryPlace::kDevice, device(), workspace);
  runtime::MemoryReport out;
  for (const runtime::MemoryFigure& f : sum.figures()) out.Add(f.kind, f.place, f.device, f.bytes, true);
  return out;
}

CudaContext::CudaContext(CudaEngine* engine) : engine_(engine) {}

void CudaContext::PrintProfile() const {
  for (const auto& [key, b] : buckets_) {
    if (b->prof_runs == 0) continue;
    const double runs = b->prof_runs;
    double total = 0;
    std::map<std::string, double> families;
    std::vector<std::pair<double, const Bucket::Step*>> by_time;
    for (const auto& st : b->steps) {
      if (!st.kernel) continue;
      total += st.prof_ms / runs;
      families[st.kernel->family()] += st.prof_ms / runs;
      by_time.emplace_back(st.prof_ms / runs, &st);
    }
    std::sort(by_time.begin(), by_time.end(), [](const auto& a, const auto& c) { return a.first > c.first; });
    std::fprintf(stderr, "=== CUDA step profile (%d runs, %.4f ms of device steps per run) ===\n", b->prof_runs, total);
    for (const auto& [fam, ms] : families)
      std::fprintf(stderr, "  %-16s %9.4f ms %5.1f%%\n", fam.c_str(), ms, 100.0 * ms / std::max(total, 1e-12));
    for (size_t i = 0; i < by_time.size() && i < 25; ++i)
      std::fprintf(stderr, "  %9.4f ms  %-14s %s\n", by_time[i].first, by_time[i].second->kernel->family(),
                   by_time[i].second->node->Label().c_str());
  }
}

CudaContext::~CudaContext() {
  cudaSetDevice(engine_->options().device);
  if (stream_) cudaStreamSynchronize(stream_);
  if (ProfileSteps()) PrintProfile();
  subgraphs_.reset();
  buckets_.clear();
  flights_.clear();
  finished_.clear();
  for (auto& slot : ev_)
    for (auto& e : slot)
      if (e) cudaEventDestroy(e);
  if (wait_ev_) cudaEventDestroy(wait_ev_);
  if (workspace_) cudaFree(workspace_);
  if (bad_index_) cudaFree(bad_index_);
  if (bad_index_host_) cudaFreeHost(bad_index_host_);
  if (dnn_) cudnnDestroy(dnn_);
  if (lt_) cublasLtDestroy(lt_);
  if (stream_) cudaStreamDestroy(stream_);
}

Result<std::vector<Tensor>> CudaContext::Run(const std::map<std::string, Tensor>& inputs, runtime::Timing* timing) {
  Settle();  // pipelined runs still in flight finish first; their results are dropped
  finished_.clear();
  Flight f;
  SP_RETURN_IF_ERROR(Launch(inputs, &f));
  return Complete(f, timing);
}

int CudaContext::max_in_flight() const {
  return transfers_ || ProfileSteps() ? 1 : kFlights;
}

Status CudaContext::SetDataTransfers(bool enabled) {
  if (!flights_.empty() || !finished_.empty())
    return FailedPrecondition("SetDataTransfers: ", flights_.size() + finished_.size(),
                              " pipelined run(s) not finished (Finish them first)");
  transfers_ = enabled;
  return Status::Ok();
}

Status CudaContext::Enqueue(const std::map<std::string, Tensor>& inputs) {
  const size_t open = flights_.size() + finished_.size();
  if (static_cast<int>(open) >= max_in_flight())
    return FailedPrecondition("Enqueue: ", open, " run(s) in flight, at most ", max_in_flight(),
                              (transfers_ ? " (runs overlap only with data transfers off)" : ""), "; Finish one first");
  Flight f;
  SP_RETURN_IF_ERROR(Launch(inputs, &f));
  flights_.push_back(std::move(f));
  return Status::Ok();
}

Status CudaContext::Finish(runtime::Timing* timing) {
  if (!finished_.empty()) {  // completed while a later launch needed an idle stream
    Result<runtime::Timing> done = std::move(finished_.front());
    finished_.pop_front();
    SP_RETURN_IF_ERROR(done.status());
    *timing = *done;
    return Status::Ok();
  }
  if (flights_.empty()) return FailedPrecondition("Finish: no run in flight (Enqueue first)");
  Flight f = std::move(flights_.front());
  flights_.pop_front();
  return Complete(f, timing).status();
}

void CudaContext::Settle() {
  while (!flights_.empty()) {
    Flight f = std::move(flights_.front());
    flights_.pop_front();
    runtime::Timing t;
    auto r = Complete(f, &t);
    finished_.push_back(r.ok() ? Result<runtime::Timing>(t) : Result<runtime::Timing>(r.status()));
  }
}

namespace {
// Device memory for a RunDevice output the caller gave no buffer for.
Result<runtime::DeviceTensor> NewDeviceTensor(DType dtype, const Shape& shape, int device) {
  runtime::DeviceTensor d;
  d.dtype = dtype;
  d.shape = shape;
  if (d.nbytes() == 0) return d;
  SP_ASSIGN_OR_RETURN(d.owner, AllocShared(device, d.nbytes()));
  d.data = d.owner.get();
  return d;
}
}  // namespace

Status CudaContext::WaitForStreams(const std::vector<uintptr_t>& streams) {
  if (streams.empty()) return Status::Ok();
  if (!wait_ev_) SP_CUDA(cudaEventCreateWithFlags(&wait_ev_, cudaEventDisableTiming));
  for (const uintptr_t s : streams) {
    // __cuda_array_interface__'s encoding: 1 the legacy default stream, 2 the per-thread one.
    cudaStream_t producer = s == 1   ? cudaStreamLegacy
                            : s == 2 ? cudaStreamPerThread
                                     : reinterpret_cast<cudaStream_t>(s);
    if (producer == stream_) continue;
    SP_CUDA(cudaEventRecord(wait_ev_, producer));
    SP_CUDA(cudaStreamWaitEvent(stream_, wait_ev_, 0));
  }
  return Status::Ok();
}

Status CudaContext::Launch(const std::map<std::string, Tensor>& inputs, Flight* f, const runtime::DeviceRun* dev) {
  f->t0 = std::chrono::steady_clock::now();
  SP_RETURN_IF_ERROR(StickyDeviceError(engine_->options().device));
  SP_CUDA(cudaSetDevice(engine_->options().device));
  const ir::Graph& g = *engine_->plan().graph;
  if (!host_exec_) host_exec_ = std::make_unique<reference::Executor>(engine_->plan().graph);
  SP_RETURN_IF_ERROR(host_exec_->ValidateInputs(inputs));
  const bool device_inputs = dev && !dev->device_inputs.empty();
  if (dev) SP_RETURN_IF_ERROR(WaitForStreams(dev->wait_streams));
  // Device-resident inputs as host tensors, for what reads their values on the host (planning a
  // new bucket, a graph run on the host, inputs only host steps read): downloaded once, on demand.
  std::map<std::string, Tensor> downloaded;
  auto host_inputs = [&]() -> Result<const std::map<std::string, Tensor>*> {
    if (!device_inputs) return &inputs;
    if (downloaded.empty()) {
      std::map<std::string, Tensor> copy = inputs;
      for (const auto& [name, d] : dev->device_inputs) {
        Tensor t = Tensor::Alloc(d.dtype, d.shape);
        if (d.nbytes() > 0)
          SP_CUDA(cudaMemcpyAsync(t.mutable_raw(), d.data, d.nbytes(), cudaMemcpyDeviceToHost, stream_));
        copy[name] = std::move(t);
      }
      SP_CUDA(cudaStreamSynchronize(stream_));
      downloaded = std::move(copy);
    }
    return &downloaded;
  };
  std::vector<Shape> key;
  for (const ir::Value* in : g.inputs()) key.push_back(inputs.at(in->name()).shape());
  auto found = buckets_.find(key);
  if (found == buckets_.end()) {
    Settle();  // planning may replace the workspace the runs in flight use
    SP_ASSIGN_OR_RETURN(const auto* host, host_inputs());
    SP_ASSIGN_OR_RETURN(auto bucket, Plan(*host, true));
    memory_.Add(bucket->memory);
    found = buckets_.emplace(key, std::move(bucket)).first;
  }
  Bucket& b = *found->second;
  f->bucket = &b;
  if (b.whole_graph_on_host) {
    Settle();
    SP_ASSIGN_OR_RETURN(const auto* host, host_inputs());
    ops::ScopedSubgraphExecutor subgraphs(subgraphs_.get());
    f->host_result = host_exec_->Run(*host);
    return Status::Ok();
  }
  // RunDevice's outputs: the caller's buffers, checked against this bucket's shapes, or new ones.
  if (dev) {
    f->dev_out.assign(g.outputs().size(), runtime::DeviceTensor{});
    f->dev_ready.assign(g.outputs().size(), false);
    for (size_t i = 0; i < g.outputs().size(); ++i) {
      const ir::Value* outv = g.outputs()[i];
      if (outv->is_constant()) continue;
      const Bucket::Val& val = b.vals[outv];
      if (val.object || !val.device || val.dev == nullptr) continue;  // from the host: Complete returns it
      runtime::DeviceTensor& d = f->dev_out[i];
      auto given = dev->outputs.find(outv->name());
      if (given != dev->outputs.end()) {
        if (given->second.dtype != val.dtype || given->second.shape != val.shape)
          return InvalidArgument("output '", outv->name(), "' is ", DTypeName(val.dtype), ShapeToString(val.shape),
                                 ", the buffer given for it is ", DTypeName(given->second.dtype),
                                 ShapeToString(given->second.shape));
        if (given->second.data == nullptr && val.bytes() > 0)
          return InvalidArgument("output '", outv->name(), "': a null device pointer");
        d = given->second;
      } else {
        SP_ASSIGN_OR_RETURN(d, NewDeviceTensor(val.dtype, val.shape, engine_->options().device));
      }
      f->dev_ready[i] = true;
    }
  }
  const bool want_graph = engine_->options().use_cuda_graph && !b.host_steps && !b.graph_failed && !ProfileSteps();
  // The first runs of a bucket (eager, then the capture) start on an idle stream.
  if (!b.graph && (want_graph || b.runs == 0)) Settle();
  // The slot the run before (if still in flight) does not use: a failed launch leaves none taken.
  f->slot = flights_.empty() ? 0 : 1 - flights_.back().slot;
  cudaEvent_t* ev = ev_[f->slot];
  // Inputs: host -> pinned -> device.
  SP_CUDA(cudaEventRecord(ev[0], stream_));
  const bool upload = transfers_ || !b.inputs_resident;
  for (size_t i = 0; upload && i < g.inputs().size(); ++i) {
    const ir::Value* in = g.inputs()[i];
    const Tensor& t = inputs.at(in->name());
    Bucket::Val& val = b.vals[in];
    const runtime::DeviceTensor* on_device = nullptr;
    if (device_inputs) {
      auto it = dev->device_inputs.find(in->name());
      if (it != dev->device_inputs.end()) on_device = &it->second;
    }
    if (val.object) {  // read by host steps only
      if (on_device) {
        SP_ASSIGN_OR_RETURN(const auto* host, host_inputs());
        val.host = host->at(in->name()).Clone();
      } else {
        val.host = t.Clone();
      }
      continue;
    }
    if (val.bytes() == 0) continue;
    if (on_device) {
      SP_CUDA(cudaMemcpyAsync(val.dev, on_device->data, val.bytes(), cudaMemcpyDeviceToDevice, stream_));
      continue;
    }
    // Page-locked inputs (AllocateHostInput) go to the device directly; others through staging.
    const void* src = t.raw();
    if (!IsPinnedHost(src)) {
      std::memcpy(b.in_pinned[i], src, val.bytes());
      src = b.in_pinned[i];
    }
    SP_CUDA(cudaMemcpyAsync(val.dev, src, val.bytes(), cudaMemcpyHostToDevice, stream_));
  }
  b.inputs_resident = true;
  SP_CUDA(cudaMemsetAsync(bad_index_, 0, sizeof(int), stream_));
  SP_CUDA(cudaEventRecord(ev[1], stream_));
  if (want_graph && !b.graph && b.runs >= 1) {
    // Second run of a bucket: capture (the first ran eagerly, loading modules and tuning libraries).
    SP_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    Status s = RunSteps(b);
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    if (s.ok() && e == cudaSuccess) e = cudaGraphInstantiate(&b.graph, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (!s.ok() || e != cudaSuccess) {
      cudaGetLastError();
      b.graph = nullptr;
      b.graph_failed = true;  // runs eagerly from now on
      if (!s.ok()) return s;
    }
  }
  if (b.graph) {
    SP_CUDA(cudaGraphLaunch(b.graph, stream_));
  } else {
    SP_RETURN_IF_ERROR(RunSteps(b));
  }
  SP_CUDA(cudaEventRecord(ev[2], stream_));
  for (size_t i = 0; transfers_ && i < g.outputs().size(); ++i) {
    if (g.outputs()[i]->is_constant()) continue;
    Bucket::Val& val = b.vals[g.outputs()[i]];
    if (val.bytes() == 0 || !val.device || val.dev == nullptr) continue;
    if (dev && f->dev_ready[i]) {
      SP_CUDA(cudaMemcpyAsync(f->dev_out[i].data, val.dev, val.bytes(), cudaMemcpyDeviceToDevice, stream_));
      continue;
    }
    SP_CUDA(cudaMemcpyAsync(b.out_pinned[i], val.dev, val.bytes(), cudaMemcpyDeviceToHost, stream_));
  }
  SP_CUDA(cudaMemcpyAsync(bad_index_host_ + f->slot, bad_index_, sizeof(int), cudaMemcpyDeviceToHost, stream_));
  SP_CUDA(cudaEventRecord(ev[3], stream_));
  return Status::Ok();
}

Result<std::vector<Tensor>> CudaContext::Complete(Flight& f, runtime::Timing* timing) {
  Bucket& b = *f.bucket;
  if (f.host_result) {
    stats_ = b.stats;
    stats_.whole_graph_on_host = true;
    timing->compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - f.t0).count();
    return std::move(*f.host_result);
  }
  const ir::Graph& g = *engine_->plan().graph;
  cudaEvent_t* ev = ev_[f.slot];
  SP_CUDA(cudaEventSynchronize(ev[3]));
  ++b.runs;
  if (ProfileSteps() && b.runs > 1) {  // the first run pays lazy module loading: left out
    for (auto& st : b.steps) {
      float ms = 0;
      if (st.prof_start && cudaEventElapsedTime(&ms, st.prof_start, st.prof_stop) == cudaSuccess) st.prof_ms += ms;
    }
    ++b.prof_runs;
  }
  if (bad_index_host_[f.slot]) return InvalidArgument("Gather: an index is out of range");
  std::vector<Tensor> results;
  for (size_t i = 0; transfers_ && i < g.outputs().size(); ++i) {
    const ir::Value* outv = g.outputs()[i];
    if (outv->is_constant()) {  // folded at build time
      results.push_back(outv->data.Clone());
      continue;
    }
    Bucket::Val& val = b.vals[outv];
    if (val.object || (val.planned && (!val.device || val.dev == nullptr || outv->is_constant()))) {
      results.push_back(val.host.Clone());
      continue;
    }
    if (val.bytes() > 0 && val.dev == nullptr)  // e.g. an inference Dropout's mask, never computed
      return Unsupported("output '", outv->name(), "' is not computed on the device");
    if (i < f.dev_ready.size() && f.dev_ready[i]) {  // RunDevice: already in its device buffer
      results.emplace_back();
      continue;
    }
    Tensor t = Tensor::Alloc(val.dtype, val.shape);
    if (val.bytes() > 0) std::memcpy(t.mutable_raw(), b.out_pinned[i], val.bytes());
    results.push_back(std::move(t));
  }
  float h2d = 0, comp = 0, d2h = 0;
  SP_CUDA(cudaEventElapsedTime(&h2d, ev[0], ev[1]));
  SP_CUDA(cudaEventElapsedTime(&comp, ev[1], ev[2]));
  SP_CUDA(cudaEventElapsedTime(&d2h, ev[2], ev[3]));
  timing->h2d_ms = h2d;
  timing->compute_ms = comp;
  timing->d2h_ms = d2h;
  stats_ = b.stats;
  stats_.graph_captured = b.graph != nullptr;
  return results;
}

Result<std::vector<runtime::DeviceTensor>> CudaContext::RunDevice(const runtime::DeviceRun& run,
                                                                  runtime::Timing* timing) {
  Settle();  // pipelined runs still in flight finish first; their results are dropped
  finished_.clear();
  if (!transfers_) return FailedPrecondition("RunDevice: data transfers are off on this context (a benchmark setting)");
  // Device inputs stand in the input map as shape-only tensors (validated like host ones; their
  // data pointer is the device's and is never read on the host).
  std::map<std::string, Tensor> inputs = run.host_inputs;
  for (const auto& [name, d] : run.device_inputs) inputs[name] = Tensor::Wrap(d.dtype, d.shape, nullptr, d.data);
  Flight f;
  SP_RETURN_IF_ERROR(Launch(inputs, &f, &run));
  SP_ASSIGN_OR_RETURN(std::vector<Tensor> host, Complete(f, timing));
  // Outputs that came from the host (a host step's result, a constant, a graph run on the host)
  // go up into the caller's buffer or a new one.
  const ir::Graph& g = *engine_->plan().graph;
  std::vector<runtime::DeviceTensor> out(g.outputs().size());
  bool uploaded = false;
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    if (i < f.dev_ready.size() && f.dev_ready[i]) {
      out[i] = std::move(f.dev_out[i]);
      continue;
    }
    const std::string& name = g.outputs()[i]->name();
    if (i >= host.size()) return Internal("RunDevice: output '", name, "' was not produced");
    const Tensor& t = host[i];
    if (t.is_sequence() || t.is_optional() || t.dtype() == DType::kString)
      return Unsupported("output '", name, "' is ", DTypeName(t.dtype()),
                         ", which has no device memory form: run with host outputs");
    runtime::DeviceTensor& d = out[i];
    auto given = run.outputs.find(name);
    if (given != run.outputs.end()) {
      if (given->second.dtype != t.dtype() || given->second.shape != t.shape())
        return InvalidArgument("output '", name, "' is ", t.Describe(), ", the buffer given for it is ",
                               DTypeName(given->second.dtype), ShapeToString(given->second.shape));
      d = given->second;
    } else {
      SP_ASSIGN_OR_RETURN(d, NewDeviceTensor(t.dtype(), t.shape(), engine_->options().device));
    }
    if (t.nbytes() > 0) {
      SP_CUDA(cudaMemcpyAsync(d.data, t.raw(), t.nbytes(), cudaMemcpyHostToDevice, stream_));
      uploaded = true;
    }
  }
  if (uploaded) SP_CUDA(cudaStreamSynchronize(stream_));
  return out;
}

Tensor CudaContext::AllocateHostInput(DType dtype, const Shape& shape) {
  std::shared_ptr<PinnedPool> pool = std::atomic_load(&pinned_pool_);
  if (!pool) {
    // Cached when idle: up to 1 GiB per context (a few batches of large images).
    pool = std::make_shared<PinnedPool>(engine_->options().device, size_t{1} << 30);
    std::atomic_store(&pinned_pool_, pool);  // MemoryUsage reads it from other threads
  }
  return pool->Allocate(dtype, shape);
}

}  // namespace sampan::cuda
