#include "runtime/engine.h"

#include <chrono>
#include <set>

#include "runtime/reference_context.h"

namespace sampan::runtime {

namespace {

std::string RangeText(const plan::ShapeRange& r) {
  std::string s;
  for (size_t d = 0; d < r.min.size(); ++d) {
    if (d) s += "x";
    s += r.min[d] == r.max[d] ? std::to_string(r.min[d]) : StrCat(r.min[d], "..", r.max[d]);
  }
  return s;
}

// `shape` against the rank and known dimensions of graph input `in`.
Status CheckShape(const ir::Value& in, const Shape& shape) {
  if (!in.type.dims) return Status::Ok();
  const ir::Dims& dims = *in.type.dims;
  bool ok = shape.size() == dims.size();
  for (size_t d = 0; ok && d < dims.size(); ++d) ok = shape[d] >= 0 && (!dims[d].known() || dims[d].value == shape[d]);
  if (!ok)
    return InvalidArgument("input '", in.name(), "' is ", in.type.ToString(), ", which ", ShapeToString(shape),
                           " does not fit");
  return Status::Ok();
}

}  // namespace

Result<std::shared_ptr<Engine>> Engine::Create(plan::Plan plan, const EngineOptions& options) {
  if (!plan.graph) return InvalidArgument("plan has no graph");
  const std::string backend_name = plan.fingerprint.backend.empty() ? "reference" : plan.fingerprint.backend;
  const Backend* backend = FindBackend(backend_name);
  if (!backend) {
    std::string names;
    for (const auto& n : BackendNames()) names += (names.empty() ? "" : ", ") + n;
    return Unsupported("the plan is for backend '", backend_name,
                       "', which this build does not include (available: ", names, ")");
  }
  if (backend->available) {
    Status avail = backend->available();
    if (!avail.ok()) return avail.WithContext(StrCat("backend '", backend_name, "'"));
  }
  if (!plan.options.portable)
    SP_RETURN_IF_ERROR(plan::CheckFingerprint(plan.fingerprint, backend->fingerprint(options.device)));
  std::shared_ptr<Engine> engine(new Engine(std::move(plan), options));
  SP_ASSIGN_OR_RETURN(engine->impl_, backend->create(engine->plan_, options));
  std::set<const ir::Value*> seen;
  for (const auto& n : engine->plan_.graph->nodes())
    for (const ir::Value* v : n->inputs())
      if (v != nullptr && v->is_constant() && seen.insert(v).second) engine->plan_weight_bytes_ += v->data.nbytes();
  return engine;
}

MemoryReport Engine::MemoryUsage() const {
  MemoryReport r;
  r.Add(MemoryKind::kPlanWeights, MemoryPlace::kHost, 0, plan_weight_bytes_);
  r.Add(impl_->MemoryUsage());
  return r;
}

Result<MemoryReport> Engine::EstimateContextMemory(const std::vector<std::map<std::string, Shape>>& shape_sets) {
  SP_RETURN_IF_ERROR(health());
  for (size_t i = 0; i < shape_sets.size(); ++i) {
    const auto& set = shape_sets[i];
    for (const ir::Value* in : plan_.graph->inputs()) {
      auto it = set.find(in->name());
      if (it == set.end()) return InvalidArgument("shape set ", i, ": graph input '", in->name(), "' has no shape");
      SP_RETURN_IF_ERROR(CheckShape(*in, it->second).WithContext(StrCat("shape set ", i)));
    }
    for (const auto& [name, shape] : set) {
      bool input = false;
      for (const ir::Value* in : plan_.graph->inputs()) input |= in->name() == name;
      if (!input) return InvalidArgument("shape set ", i, ": the graph has no input named '", name, "'");
    }
    auto profile = SelectProfile(set);
    if (!profile.ok()) return profile.status().WithContext(StrCat("shape set ", i));
  }
  return impl_->EstimateContextMemory(shape_sets);
}

Status Engine::health() const {
  if (!healthy_.load()) return FailedPrecondition("engine is unhealthy after a device error");
  return impl_->Health();
}

Result<std::shared_ptr<Engine>> Engine::Load(const std::string& path, const EngineOptions& options) {
  SP_ASSIGN_OR_RETURN(plan::Plan p, plan::ReadPlan(path));
  auto engine = Create(std::move(p), options);
  if (!engine.ok()) return engine.status().WithContext(path);
  return engine;
}

Result<std::unique_ptr<Context>> Engine::CreateContext() {
  SP_RETURN_IF_ERROR(health());
  SP_ASSIGN_OR_RETURN(std::unique_ptr<ContextImpl> impl, impl_->CreateContext());
  return std::make_unique<Context>(shared_from_this(), std::move(impl));
}

Result<int> Engine::SelectProfile(const std::map<std::string, Shape>& shapes) const {
  if (plan_.profiles.empty()) return -1;
  std::string why;
  for (size_t p = 0; p < plan_.profiles.size(); ++p) {
    bool fits = true;
    for (const auto& [name, range] : plan_.profiles[p]) {
      auto it = shapes.find(name);
      if (it == shapes.end()) continue;  // missing inputs are reported by the executor
      const Shape& s = it->second;
      bool ok = s.size() == range.min.size();
      for (size_t d = 0; ok && d < s.size(); ++d) ok = s[d] >= range.min[d] && s[d] <= range.max[d];
      if (!ok) {
        fits = false;
        why += StrCat("\n  profile ", p, ": input '", name, "' is ", ShapeToString(s), ", allowed ", RangeText(range));
        break;
      }
    }
    if (fits) return static_cast<int>(p);
  }
  return InvalidArgument("input shapes are outside every optimization profile of the plan:", why);
}

Status Context::BeginRun(const std::map<std::string, Shape>& shapes) {
  SP_RETURN_IF_ERROR(engine_->health());
  SP_ASSIGN_OR_RETURN(profile_, engine_->SelectProfile(shapes));
  timing_ = Timing{};
  flights_.clear();  // the backend finishes pipelined runs still in flight before this one
  return Status::Ok();
}

void Context::EndRun(std::chrono::steady_clock::time_point t0) {
  timing_.enqueue_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() -
                       timing_.compute_ms - timing_.h2d_ms - timing_.d2h_ms;
  if (timing_.enqueue_ms < 0) timing_.enqueue_ms = 0;
}

Result<std::vector<Tensor>> Context::Run(const std::map<std::string, Tensor>& inputs) {
  const auto t0 = std::chrono::steady_clock::now();
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : inputs) shapes[name] = t.shape();
  SP_RETURN_IF_ERROR(BeginRun(shapes));
  auto out = impl_->Run(inputs, &timing_);
  EndRun(t0);
  return out;
}

Result<std::vector<DeviceTensor>> Context::RunDevice(const DeviceRun& run) {
  const auto t0 = std::chrono::steady_clock::now();
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : run.host_inputs) shapes[name] = t.shape();
  for (const auto& [name, t] : run.device_inputs) {
    if (!shapes.emplace(name, t.shape).second)
      return InvalidArgument("input '", name, "' is given twice (in host and in device memory)");
    if (t.data == nullptr && t.nbytes() > 0) return InvalidArgument("input '", name, "': a null device pointer");
  }
  for (const uintptr_t s : run.wait_streams)
    if (s == 0) return InvalidArgument("stream 0 is not a stream handle (1: the legacy default stream, 2: per-thread)");
  SP_RETURN_IF_ERROR(BeginRun(shapes));
  auto out = impl_->RunDevice(run, &timing_);
  EndRun(t0);
  return out;
}

Status Context::Enqueue(const std::map<std::string, Tensor>& inputs) {
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
  if (static_cast<int>(flights_.size()) >= max_in_flight())
    return FailedPrecondition("Enqueue: ", flights_.size(), " run(s) in flight, at most ", max_in_flight(),
                              "; Finish one first");
  SP_RETURN_IF_ERROR(engine_->health());
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : inputs) shapes[name] = t.shape();
  SP_ASSIGN_OR_RETURN(profile_, engine_->SelectProfile(shapes));
  if (impl_->max_in_flight() <= 1) {  // runs to the end now; Finish hands back the timing
    Timing t;
    auto out = impl_->Run(inputs, &t);
    if (!out.ok()) return out.status();
    t.enqueue_ms = std::max(0.0, since() - t.compute_ms - t.h2d_ms - t.d2h_ms);
    flights_.push_back(Flight{t, false});
    return Status::Ok();
  }
  SP_RETURN_IF_ERROR(impl_->Enqueue(inputs));
  Timing t;
  t.enqueue_ms = since();
  flights_.push_back(Flight{t, true});
  return Status::Ok();
}

Result<Timing> Context::Finish() {
  if (flights_.empty()) return FailedPrecondition("Finish: no run in flight (Enqueue first)");
  const Flight f = flights_.front();
  flights_.pop_front();
  Timing done = f.timing;
  if (f.pipelined) {
    SP_RETURN_IF_ERROR(impl_->Finish(&done));
    done.enqueue_ms = f.timing.enqueue_ms;
  }
  timing_ = done;
  return done;
}

}  // namespace sampan::runtime
