// The CUDA backend at run time.
//   CudaEngine  = a plan bound to one GPU: weights uploaded once, shared by contexts.
//   CudaContext = one instance: its own stream, cuBLASLt/cuDNN handles, workspace,
//                 pinned staging and, per input-shape bucket, a device arena planned
//                 from tensor lifetimes, prepared kernels and (optionally) a CUDA graph.
// Nodes without a device kernel run on the host with the ops/ reference kernel
// (inputs copied down, outputs copied back), so every plan runs. A control-flow node is
// such a host step, and its subgraphs run on CUDA kernels (subgraph_executor.h).
// SAMPAN_CUDA_PROFILE=1 times every device step (eagerly) and prints a per-node
// summary when the context goes away.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cuda/node_kernel.h"
#include "backends/cuda/pinned_pool.h"
#include "backends/reference/executor.h"
#include "runtime/engine.h"

namespace sampan::cuda {

class CudaSubgraphExecutor;

class CudaEngine : public runtime::BackendEngine {
 public:
  static Result<std::unique_ptr<CudaEngine>> Create(const plan::Plan& plan, const runtime::EngineOptions& options);
  ~CudaEngine() override;
  Result<std::unique_ptr<runtime::ContextImpl>> CreateContext() override;
  Status Health() const override;
  //! The weight block on the device (every constant a node reads, each aligned to 256 bytes).
  runtime::MemoryReport MemoryUsage() const override;
  //! Plans each shape set as a context would (same kernels, layouts and arena planning) on a
  //! context made for the purpose and dropped after, allocating no arena, upload, workspace or
  //! staging: their sizes, and the data its kernels made (allocated while it runs), are the
  //! estimate. Library handles and CUDA graphs are not in it (runtime/memory_usage.h).
  Result<runtime::MemoryReport> EstimateContextMemory(
      const std::vector<std::map<std::string, Shape>>& shape_sets) override;

  const plan::Plan& plan() const { return plan_; }
  const runtime::EngineOptions& options() const { return options_; }
  //! Device copy of a constant (nullptr for values that are not constants).
  void* weight(const ir::Value* v) const;

 private:
  CudaEngine(const plan::Plan& plan, const runtime::EngineOptions& options) : plan_(plan), options_(options) {}
  const plan::Plan& plan_;
  runtime::EngineOptions options_;
  std::unordered_map<const ir::Value*, void*> weights_;
  void* weight_block_ = nullptr;
  size_t weight_block_bytes_ = 0;
};

class CudaContext : public runtime::ContextImpl {
 public:
  ~CudaContext() override;
  static Result<std::unique_ptr<CudaContext>> Create(CudaEngine* engine);
  //! The stream every run of this context is queued on (created with the engine's stream priority).
  cudaStream_t stream() const { return stream_; }
  Result<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& inputs, runtime::Timing* timing) override;
  //! Pipelined runs (runtime::ContextImpl): two in flight on the context's stream while data
  //! transfers are off (the inputs stay resident, so a run's upload cannot overwrite staging
  //! that the run before still reads); one otherwise, and under SAMPAN_CUDA_PROFILE. Each slot
  //! has its own events and index-check flag.
  int max_in_flight() const override;
  Status Enqueue(const std::map<std::string, Tensor>& inputs) override;
  Status Finish(runtime::Timing* timing) override;
  //! Off: inputs uploaded once per bucket stay resident, outputs are not copied back (bench hook).
  //! Refused while pipelined runs are not finished.
  Status SetDataTransfers(bool enabled) override;
  //! Page-locked buffers from this context's pool: Run copies them to the device directly.
  Tensor AllocateHostInput(DType dtype, const Shape& shape) override;
  //! On the device: each bucket's arena, uploaded folded values and kernels' data, the
  //! workspace (and the 4-byte index flag); pinned: each bucket's staging, the index flags and
  //! the AllocateHostInput pool (blocks handed out and cached); and what the control-flow
  //! subgraphs' engines and contexts hold. Thread-safe.
  runtime::MemoryReport MemoryUsage() const override;
  //! CudaEngine::EstimateContextMemory on this (fresh) context: what planning `shape_sets`
  //! would allocate, plus the fixed per-context buffers; figures marked estimate.
  Result<runtime::MemoryReport> Estimate(const std::vector<std::map<std::string, Shape>>& shape_sets);
  //! Device-resident I/O: device inputs are copied device to device into the bucket's input
  //! buffers after the context's stream waits for the producers' streams; device outputs are
  //! copied device to device into the caller's buffers (or cudaMalloc'ed ones). Values only the
  //! host reads (planning a new shape bucket, a graph run on the host) are downloaded for it.
  Result<std::vector<runtime::DeviceTensor>> RunDevice(const runtime::DeviceRun& run, runtime::Timing* timing) override;

  //! For tests and reports: how the last bucket runs.
  struct Stats {
    size_t device_steps = 0, view_steps = 0, host_steps = 0, folded_steps = 0;
    size_t arena_bytes = 0;
    bool graph_captured = false;
    bool whole_graph_on_host = false;
    std::string host_reason;  //!< why, when whole_graph_on_host
    std::map<std::string, size_t> families;
    size_t channels_last_values = 0;  //!< activations stored NHWC (layout.h)
  };
  const Stats& last_stats() const { return stats_; }

 private:
  struct Bucket;
  explicit CudaContext(CudaEngine* engine);
  //! `channels_last` off keeps every activation NCHW (the fallback when a node that
  //! would read or write channels-last data has no device kernel at these shapes).
  //! `allocate` off (Estimate): kernels are made, but no arena, upload, workspace or staging;
  //! Bucket::memory says what they would take. Only the inputs' types and shapes are read.
  Result<std::unique_ptr<Bucket>> Plan(const std::map<std::string, Tensor>& inputs, bool channels_last,
                                       bool allocate = true);
  Status RunSteps(Bucket& b);
  //! One run in flight: its bucket, its event/flag slot; a graph that runs wholly on the host
  //! has its result already.
  struct Flight {
    Bucket* bucket = nullptr;
    int slot = 0;
    std::chrono::steady_clock::time_point t0;
    std::optional<Result<std::vector<Tensor>>> host_result;
    //! RunDevice: per graph output, the device buffer the run wrote (dev_ready) or nothing (the
    //! output came from the host: Complete returns it as a host tensor).
    std::vector<runtime::DeviceTensor> dev_out;
    std::vector<bool> dev_ready;
  };
  //! Validates and uploads the inputs and launches the run on the stream without waiting.
  //! `dev` (RunDevice): its device inputs stand in `inputs` as shape-only tensors whose data is
  //! the device pointer (never read on the host), and outputs go to device buffers.
  Status Launch(const std::map<std::string, Tensor>& inputs, Flight* f, const runtime::DeviceRun* dev = nullptr);
  //! The context's stream waits for the work queued so far on each of `streams`.
  Status WaitForStreams(const std::vector<uintptr_t>& streams);
  //! Waits for a launched run; its outputs (none with data transfers off) and timing.
  Result<std::vector<Tensor>> Complete(Flight& f, runtime::Timing* timing);
  //! Completes every run in flight (a launch that needs an idle stream: first runs, captures,
  //! a new shape bucket, a graph run on the host) into finished_, which Finish hands out first,
  //! so each Enqueue still has its own Finish.
  void Settle();
  Status EnsureWorkspace(size_t bytes);
  int device() const { return engine_->options().device; }
  //! Per-step device times gathered under SAMPAN_CUDA_PROFILE=1, to stderr.
  void PrintProfile() const;

  CudaEngine* engine_;
  std::shared_ptr<PinnedPool> pinned_pool_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cudnnHandle_t dnn_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  int* bad_index_ = nullptr;
  static constexpr int kFlights = 2;
  int* bad_index_host_ = nullptr;     //!< pinned, one flag per flight slot
  cudaEvent_t ev_[kFlights][4] = {};  //!< per slot: before upload, before compute, after compute, after download
  cudaEvent_t wait_ev_ = nullptr;     //!< RunDevice: recorded on a producer's stream, waited for on ours
  std::deque<Flight> flights_;
  std::deque<Result<runtime::Timing>> finished_;
  std::map<std::vector<Shape>, std::unique_ptr<Bucket>> buckets_;
  std::unique_ptr<reference::Executor> host_exec_;
  //! Runs the subgraphs of control-flow nodes on CUDA kernels: current around host steps.
  std::unique_ptr<CudaSubgraphExecutor> subgraphs_;
  Stats stats_;
  bool transfers_ = true;
  //! What this context allocated (buckets, workspace, flags); the pinned pool and the subgraphs
  //! report theirs apart (MemoryUsage).
  runtime::MemoryTally memory_;
};

}  // namespace sampan::cuda
