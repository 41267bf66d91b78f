// Registers the "sim" backend (sim.h: a SIMULATED GPU for cluster rehearsals) with the runtime
// and the builder.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/sim/sim.h"
#include "builder/backend_builder.h"
#include "runtime/backend.h"
#include "runtime/engine.h"
#include "runtime/plan_walk.h"

namespace sampan::sim {
namespace {

//! The output types a graph gives for concrete input types (every node "lowered": nothing runs).
Result<std::vector<runtime::ConcreteType>> OutputTypes(const ir::Graph& g,
                                                       const std::map<std::string, runtime::ConcreteType>& in) {
  SP_ASSIGN_OR_RETURN(runtime::PlanWalk walk,
                      runtime::WalkPlan(g, in, [](const runtime::LowerRequest&) { return Status::Ok(); }));
  if (walk.dynamic)
    return Unsupported("the sim backend needs output shapes that follow from the input shapes; ", walk.dynamic_reason);
  std::vector<runtime::ConcreteType> out;
  for (const ir::Value* v : g.outputs()) {
    const runtime::PlanValue* pv = walk.value(v);
    if (pv == nullptr) return Internal("sim: output '", v->name(), "' was not reached by the planning walk");
    out.push_back({pv->dtype, pv->shape});
  }
  return out;
}

std::string ShapesKey(const std::map<std::string, runtime::ConcreteType>& in) {
  std::string key;
  for (const auto& [name, t] : in) key += StrCat(name, ":", static_cast<int>(t.dtype), ShapeToString(t.shape), ";");
  return key;
}

//! What a sim plan is bound to: nothing of this machine (a simulation runs anywhere).
plan::Fingerprint SimFingerprint() {
  plan::Fingerprint f;
  f.backend = "sim";
  return f;
}

class SimEngine;

class SimContext : public runtime::ContextImpl {
 public:
  explicit SimContext(SimEngine& engine) : engine_(engine) {}
  Result<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& inputs, runtime::Timing* timing) override;

 private:
  SimEngine& engine_;
};

class SimEngine : public runtime::BackendEngine {
 public:
  static Result<std::unique_ptr<SimEngine>> Create(const plan::Plan& plan, const runtime::EngineOptions& options) {
    SimMachine& m = SimMachine::Get();
    SP_RETURN_IF_ERROR(m.config_status());
    auto it = plan.backend_data.find(kLatencyKey);
    if (it == plan.backend_data.end())
      return InvalidArgument("the plan has no sim latency table ('", kLatencyKey,
                             "'): build it with --backend sim --sim-profile FILE");
    auto table = LatencyTable::Parse(it->second);
    if (!table.ok()) return table.status().WithContext("the plan's sim latency table");
    uint64_t weights = 0;
    for (const ir::Value* v : plan.graph->values())
      if (v->is_constant() && !IsObjectDType(v->data.dtype())) weights += v->data.nbytes();
    SP_RETURN_IF_ERROR(m.Reserve(options.device, weights, StrCat("the plan's weights")));
    return std::unique_ptr<SimEngine>(new SimEngine(plan, options.device, std::move(*table), weights));
  }
  ~SimEngine() override { SimMachine::Get().Release(device_, weight_bytes_); }

  Result<std::unique_ptr<runtime::ContextImpl>> CreateContext() override {
    return std::unique_ptr<runtime::ContextImpl>(std::make_unique<SimContext>(*this));
  }
  Status Health() const override { return SimMachine::Get().DeviceHealth(device_); }
  std::string Describe() const override {
    return StrCat("SIMULATED GPU: sim device ", device_, " of ", SimMachine::Get().devices(),
                  ", no computation: each run waits the latency recorded in ", table_.source);
  }

  const plan::Plan& plan() const { return plan_; }
  int device() const { return device_; }
  const LatencyTable& table() const { return table_; }

  //! Output types at these input types, computed once per set of shapes.
  Result<std::vector<runtime::ConcreteType>> OutputsFor(const std::map<std::string, runtime::ConcreteType>& in) {
    const std::string key = ShapesKey(in);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = outputs_.find(key); it != outputs_.end()) return it->second;
    }
    SP_ASSIGN_OR_RETURN(auto types, OutputTypes(*plan_.graph, in));
    std::lock_guard<std::mutex> lock(mu_);
    if (outputs_.size() < 256) outputs_.emplace(key, types);
    return types;
  }

 private:
  SimEngine(const plan::Plan& plan, int device, LatencyTable table, uint64_t weight_bytes)
      : plan_(plan), device_(device), table_(std::move(table)), weight_bytes_(weight_bytes) {}
  const plan::Plan& plan_;
  int device_;
  LatencyTable table_;
  uint64_t weight_bytes_;
  std::mutex mu_;
  std::map<std::string, std::vector<runtime::ConcreteType>> outputs_;
};

Result<std::vector<Tensor>> SimContext::Run(const std::map<std::string, Tensor>& inputs, runtime::Timing* timing) {
  const auto t0 = std::chrono::steady_clock::now();
  const ir::Graph& g = *engine_.plan().graph;
  std::vector<const Tensor*> ordered;
  for (const ir::Value* in : g.inputs()) {
    auto it = inputs.find(in->name());
    ordered.push_back(it == inputs.end() ? nullptr : &it->second);
  }
  SP_RETURN_IF_ERROR(SimMachine::Get().CheckFault(engine_.device()));
  const LatencyPoint p = engine_.table().At(BatchOf(ordered));
  const auto end = SimMachine::Get().Book(engine_.device(), p.latency_ms, p.occupancy_ms);
  SP_ASSIGN_OR_RETURN(auto types, engine_.OutputsFor(runtime::ConcreteTypesOf(inputs)));
  const uint64_t seed = SeedOf(ordered);
  std::vector<Tensor> outputs;
  outputs.reserve(types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    Tensor t = Tensor::Alloc(types[i].dtype, types[i].shape);
    SP_RETURN_IF_ERROR(FillDeterministic(seed + i, &t).WithContext(StrCat("output '", g.outputs()[i]->name(), "'")));
    outputs.push_back(std::move(t));
  }
  WaitUntil(end);
  if (timing != nullptr)
    timing->compute_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return outputs;
}

// ---- runtime registration -------------------------------------------------------------

runtime::Backend MakeSimBackend() {
  runtime::Backend b;
  b.name = "sim";
  b.available = [] { return SimMachine::Get().config_status(); };
  b.fingerprint = [](int) { return SimFingerprint(); };
  b.device_count = [] { return SimMachine::Get().devices(); };
  b.describe = [] {
    SimMachine& m = SimMachine::Get();
    std::string s = "SIMULATED GPU for rehearsals: no computation, each run waits the latency its plan recorded\n";
    if (Status st = m.config_status(); !st.ok()) return s + "error: " + st.message() + "\n";
    return s + StrCat("devices: ", m.devices(), " (SAMPAN_SIM_DEVICES)\nmemory: ", m.memory_bytes() >> 20,
                      " MiB each (SAMPAN_SIM_DEVICE_MEMORY_MIB)\n");
  };
  b.create = [](const plan::Plan& plan,
                const runtime::EngineOptions& options) -> Result<std::unique_ptr<runtime::BackendEngine>> {
    SP_ASSIGN_OR_RETURN(auto engine, SimEngine::Create(plan, options));
    return std::unique_ptr<runtime::BackendEngine>(std::move(engine));
  };
  b.device_memory_used = [](int device) -> Result<size_t> {
    SimMachine& m = SimMachine::Get();
    if (device < 0 || device >= m.devices())
      return InvalidArgument("sim device ", device, " does not exist (", m.devices(), " simulated)");
    return static_cast<size_t>(m.used(device));
  };
  // As the GPU it stands for: the server pads batches up to a few bucket sizes.
  b.plans_per_shape = true;
  return b;
}

// ---- builder ------------------------------------------------------------------------------

// The output shapes must follow from the input shapes (at the plan's static shapes or profile
// 0's opt shapes, where known): a simulated run cannot compute data-dependent shapes.
Status CheckOutputsFollowInputs(const plan::Plan& plan) {
  std::map<std::string, runtime::ConcreteType> in;
  for (const ir::Value* v : plan.graph->inputs()) {
    if (v->type.is_static()) {
      in[v->name()] = {v->type.dtype, v->type.static_shape()};
    } else if (!plan.profiles.empty() && plan.profiles[0].count(v->name())) {
      in[v->name()] = {v->type.dtype, plan.profiles[0].at(v->name()).opt};
    } else {
      return Status::Ok();  // no concrete shape to try here; a run with such a shape says so
    }
  }
  return OutputTypes(*plan.graph, in).status();
}

Status Capability(plan::Plan& plan, const builder::BuildConfig&, builder::BuildReport& report) {
  report.kernel_counts["sim"] = plan.graph->nodes().size();
  return Status::Ok();
}

Status Lower(plan::Plan& plan, const builder::BuildConfig& config, builder::BuildReport& report) {
  SP_RETURN_IF_ERROR(SimMachine::Get().config_status());
  SP_ASSIGN_OR_RETURN(LatencyTable table, LatencyTable::FromBenchFiles(config.sim_profiles));
  SP_RETURN_IF_ERROR(CheckOutputsFollowInputs(plan));
  for (const auto& node : plan.graph->nodes()) plan.choices[node->name].tactic = plan::Tactic{"sim"};
  report.kernel_counts["sim"] = plan.graph->nodes().size();
  std::string points;
  for (const LatencyPoint& p : table.points)
    points += StrCat(points.empty() ? "" : ", ", "b", p.batch, " ", p.latency_ms, " ms");
  report.backend_notes.push_back(
      StrCat("sim: a SIMULATED GPU plan (nothing is computed; outputs are deterministic "
             "filler): runs wait ",
             points, " (from ", table.source, ")"));
  plan.backend_data[kLatencyKey] = table.Serialize();
  return Status::Ok();
}

builder::BackendBuilder MakeSimBuilder() {
  builder::BackendBuilder b;
  b.name = "sim";
  b.fingerprint = [](const builder::BuildConfig&) { return SimFingerprint(); };
  b.lower = Lower;
  b.capability = Capability;
  b.runs_object_types = true;  // string outputs are filled like the others
  return b;
}

}  // namespace
}  // namespace sampan::sim

SAMPAN_REGISTER_BACKEND(sim, ::sampan::sim::MakeSimBackend)
SAMPAN_REGISTER_BACKEND_BUILDER(sim, ::sampan::sim::MakeSimBuilder)
