// Engine and Context: the run-time side of a plan.
//   Engine  = a loaded plan bound to a backend: the graph and its weights, shared
//             by every context (weights are mapped from the plan file once).
//   Context = one instance's execution state (scratch, bindings); contexts of one
//             engine run concurrently, each on its own thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "plan/plan.h"
#include "runtime/backend.h"

namespace sampan::runtime {

//! Where time went in one inference (ms). Backends without a device report
//! only compute; the others are 0.
struct Timing {
  double enqueue_ms = 0;
  double h2d_ms = 0;
  double compute_ms = 0;
  double d2h_ms = 0;
};

//! Memory of the engine's device that the caller owns or was handed (device-resident I/O,
//! as TensorRT's execute_v2/enqueueV3 with device bindings): no host copy on the way in or out.
struct DeviceTensor {
  DType dtype = DType::kUndefined;
  Shape shape;
  void* data = nullptr;         //!< a device pointer (C-contiguous); may be null when empty
  std::shared_ptr<void> owner;  //!< set on outputs the runtime allocated: frees them when the last copy goes
  size_t nbytes() const { return DTypeBytes(dtype, NumElements(shape)); }
};

//! One run with device-resident I/O (ContextImpl::RunDevice).
struct DeviceRun {
  std::map<std::string, Tensor> host_inputs;          //!< inputs in host memory (uploaded as Run does)
  std::map<std::string, DeviceTensor> device_inputs;  //!< inputs already on the device (copied device to device)
  //! Caller memory to write outputs into, by name; each must match the output's type and shape. Outputs
  //! not named here land in device memory the runtime allocates (DeviceTensor::owner frees it).
  std::map<std::string, DeviceTensor> outputs;
  //! Streams (cudaStream_t as integers; 0 is not allowed, 1 the legacy default stream, 2 the
  //! per-thread default stream) whose queued work the run waits for before it reads the inputs or
  //! writes the outputs: the producers' streams (__cuda_array_interface__'s "stream").
  std::vector<uintptr_t> wait_streams;
};

//! Backend-specific execution of one context (see backends/*).
class ContextImpl {
 public:
  virtual ~ContextImpl() = default;
  //! Runs the graph on validated inputs; outputs in graph output order.
  virtual Result<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& inputs, Timing* timing) = 0;
  //! Benchmark hook (optional; `sampan bench --noDataTransfers`). With `enabled` false a
  //! device backend leaves host<->device copies out, as trtexec does: each input-shape
  //! bucket uploads its inputs on its first run and reuses them (so later inputs' values
  //! are ignored), and no output is copied back (Run returns an empty vector). Backends
  //! without a device have no transfers and ignore it.
  virtual Status SetDataTransfers(bool enabled) {
    (void)enabled;
    return Status::Ok();
  }
  //! Pipelined runs (optional; `sampan bench`, as trtexec overlaps one inference's enqueue with
  //! the compute of the one before): up to max_in_flight() runs started by Enqueue (validated
  //! inputs, outputs not returned) and not yet waited for by Finish, oldest first. A backend
  //! that does not pipeline answers 1 and runtime::Context runs each Enqueue to the end.
  virtual int max_in_flight() const { return 1; }
  virtual Status Enqueue(const std::map<std::string, Tensor>& inputs) {
    (void)inputs;
    return Unsupported("Enqueue: this context's backend does not pipeline runs (max_in_flight() is 1)");
  }
  virtual Status Finish(Timing* timing) {
    (void)timing;
    return Unsupported("Finish: this context's backend does not pipeline runs (max_in_flight() is 1)");
  }
  //! Host memory for an input of this context (optional): a device backend hands out
  //! page-locked buffers it can copy to the device directly, so a caller that
  //! assembles inputs (the server's batcher) writes them there once. Default: plain memory.
  virtual Tensor AllocateHostInput(DType dtype, const Shape& shape) { return Tensor::Alloc(dtype, shape); }
  //! A run whose inputs may be, and whose outputs are, device memory (optional; device backends).
  //! Returns when the outputs are written: outputs in graph output order, each the caller's buffer
  //! where DeviceRun::outputs names it, else runtime-allocated device memory. Inputs are validated
  //! as Run validates them (dtype, rank, dims).
  virtual Result<std::vector<DeviceTensor>> RunDevice(const DeviceRun& run, Timing* timing) {
    (void)run;
    (void)timing;
    return Unsupported(
        "device memory in and out needs a plan built for a GPU backend (--backend cuda); this "
        "context's backend runs on the host: pass host arrays");
  }
  //! Memory this context holds now: its arenas (one per input-shape signature planned so far),
  //! workspace, staging (runtime/memory_usage.h). Thread-safe: another thread may be running the
  //! context. Default: nothing (the sim backend, whose device memory is simulated).
  virtual MemoryReport MemoryUsage() const { return {}; }
};

class Context;

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  //! Binds a plan to this machine; fails when its fingerprint does not match
  //! (unless the plan is portable) or its backend is not in this build.
  static Result<std::shared_ptr<Engine>> Create(plan::Plan plan, const EngineOptions& options = {});
  //! ReadPlan + Create.
  static Result<std::shared_ptr<Engine>> Load(const std::string& path, const EngineOptions& options = {});

  const plan::Plan& plan() const { return plan_; }
  const ir::Graph& graph() const { return *plan_.graph; }
  const EngineOptions& options() const { return options_; }
  //! The backend's per-engine state (prepared weights); for backend-specific tests.
  BackendEngine& backend_engine() { return *impl_; }
  Result<std::unique_ptr<Context>> CreateContext();

  //! Index of the first profile admitting every input shape; -1 when the plan has
  //! no profiles. Error names the input, its shape and the ranges allowed.
  Result<int> SelectProfile(const std::map<std::string, Shape>& shapes) const;

  //! What the engine holds: the plan's weights as loaded (kPlanWeights, host; engines made from
  //! one plan::Plan share its graph, and so these bytes) and what the backend engine made of
  //! them (BackendEngine::MemoryUsage). Its contexts report their own (Context::MemoryUsage).
  MemoryReport MemoryUsage() const;
  //! See BackendEngine::EstimateContextMemory; shape sets are checked against the plan's inputs.
  Result<MemoryReport> EstimateContextMemory(const std::vector<std::map<std::string, Shape>>& shape_sets);

  //! False once a backend hit an unrecoverable device error (sticky).
  bool healthy() const { return healthy_.load() && impl_->Health().ok(); }
  //! Why the engine is unhealthy (Ok when healthy).
  Status health() const;
  void MarkUnhealthy() { healthy_.store(false); }

 private:
  Engine(plan::Plan plan, const EngineOptions& options) : plan_(std::move(plan)), options_(options) {}
  plan::Plan plan_;
  EngineOptions options_;
  std::unique_ptr<BackendEngine> impl_;
  uint64_t plan_weight_bytes_ = 0;  //!< constants read by the graph's nodes
  std::atomic<bool> healthy_{true};
};

class Context {
 public:
  Context(std::shared_ptr<Engine> engine, std::unique_ptr<ContextImpl> impl)
      : engine_(std::move(engine)), impl_(std::move(impl)) {}
  //! Checks shapes against the plan (declared dims and profiles) and runs.
  Result<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& inputs);
  //! Pipelined runs for benchmarks (ContextImpl::Enqueue): Enqueue checks shapes like Run and
  //! starts a run, at most max_in_flight() at once; Finish waits for the oldest and gives its
  //! timing (enqueue_ms: the host time its Enqueue took). Outputs are not returned; Run finishes
  //! the runs in flight first (their timings are dropped). Where the
  //! backend does not pipeline, Enqueue runs to the end and Finish hands back its timing.
  int max_in_flight() const { return std::max(1, impl_->max_in_flight()); }
  Status Enqueue(const std::map<std::string, Tensor>& inputs);
  Result<Timing> Finish();
  //! See ContextImpl::SetDataTransfers (for benchmarks: outputs are not returned when off).
  Status SetDataTransfers(bool enabled) { return impl_->SetDataTransfers(enabled); }
  //! Device-resident I/O (ContextImpl::RunDevice): checks shapes against the plan's profiles like
  //! Run, finishes pipelined runs in flight first, and runs.
  Result<std::vector<DeviceTensor>> RunDevice(const DeviceRun& run);
  //! See ContextImpl::AllocateHostInput. The memory is uninitialised; it may outlive the context.
  Tensor AllocateHostInput(DType dtype, const Shape& shape) { return impl_->AllocateHostInput(dtype, shape); }
  //! See ContextImpl::MemoryUsage (thread-safe).
  MemoryReport MemoryUsage() const { return impl_->MemoryUsage(); }
  const Timing& last_timing() const { return timing_; }
  int last_profile() const { return profile_; }
  Engine& engine() { return *engine_; }

 private:
  //! Run and RunDevice: the engine's health, the profile the shapes select, timings reset.
  Status BeginRun(const std::map<std::string, Shape>& shapes);
  //! The host time that the run's timing does not account for becomes its enqueue_ms.
  void EndRun(std::chrono::steady_clock::time_point t0);

  std::shared_ptr<Engine> engine_;
  std::unique_ptr<ContextImpl> impl_;
  Timing timing_;
  int profile_ = -1;
  //! Enqueue'd runs not yet finished: the timing (all of it when the run already ended, else its
  //! enqueue_ms) and whether the backend still holds it.
  struct Flight {
    Timing timing;
    bool pipelined = false;
  };
  std::deque<Flight> flights_;
};

}  // namespace sampan::runtime
