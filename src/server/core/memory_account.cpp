#include "server/core/memory_account.h"

#include <cstdlib>
#include <mutex>
#include <set>

#include "ir/graph.h"
#include "runtime/backend.h"

namespace sampan::server {

using runtime::MemoryKind;
using runtime::MemoryPlace;

std::vector<MemoryUsage> TritonMemoryUsage(const runtime::MemoryReport& report) {
  std::vector<MemoryUsage> out;
  auto add = [&](const char* type, int64_t id, uint64_t bytes) {
    if (bytes > 0) out.push_back({type, id, bytes});
  };
  add("CPU", 0, report.Total(MemoryPlace::kHost));
  add("CPU_PINNED", 0, report.Total(MemoryPlace::kPinnedHost));
  for (int d : report.Devices()) add("GPU", d, report.Total(MemoryPlace::kDevice, d));
  return out;
}

std::vector<MemoryUsage> VersionMemoryUsage(const std::vector<std::shared_ptr<runtime::Engine>>& engines,
                                            const std::vector<std::unique_ptr<runtime::Context>>& contexts) {
  runtime::MemoryReport sum;
  std::set<const ir::Graph*> plans;
  for (const auto& e : engines) {
    const runtime::MemoryReport r = e->MemoryUsage();
    const bool first_of_plan = plans.insert(&e->graph()).second;
    for (const runtime::MemoryFigure& f : r.figures())
      if (first_of_plan || f.kind != MemoryKind::kPlanWeights) sum.Add(f.kind, f.place, f.device, f.bytes);
  }
  for (const auto& c : contexts) sum.Add(c->MemoryUsage());
  return TritonMemoryUsage(sum);
}

Result<std::vector<std::map<std::string, Shape>>> PlannedShapes(const ir::Graph& graph,
                                                                const std::vector<int64_t>& batches) {
  std::vector<std::map<std::string, Shape>> sets(std::max<size_t>(batches.size(), 1));
  for (const ir::Value* in : graph.inputs()) {
    if (!in->type.dims)
      return Unavailable("input '", in->name(), "' has no known rank: its shapes come with the requests");
    const ir::Dims& dims = *in->type.dims;
    if (!batches.empty() && dims.empty())
      return InvalidArgument("input '", in->name(), "' is a scalar, which has no batch dimension");
    for (size_t d = batches.empty() ? 0 : 1; d < dims.size(); ++d)
      if (!dims[d].known())
        return Unavailable("input '", in->name(), "' (", in->type.ToString(), ") has dimension ", d,
                           " variable: its shapes come with the requests");
    for (size_t s = 0; s < sets.size(); ++s) {
      Shape shape;
      for (const ir::Dim& dim : dims) shape.push_back(dim.value);
      if (!batches.empty()) shape[0] = batches[s];
      sets[s][in->name()] = std::move(shape);
    }
  }
  return sets;
}

Result<uint64_t> GpuHeadroomBytes() {
  const char* env = std::getenv("SAMPAN_GPU_MEMORY_HEADROOM_MIB");
  if (env == nullptr || *env == 0) return uint64_t{512} << 20;
  char* end = nullptr;
  const long long mib = std::strtoll(env, &end, 10);
  if (*end != 0 || mib < 0 || mib > (1LL << 30))
    return InvalidArgument("SAMPAN_GPU_MEMORY_HEADROOM_MIB='", env, "': expected a number of MiB >= 0");
  return static_cast<uint64_t>(mib) << 20;
}

namespace {

std::mutex& PromisedMutex() {
  static std::mutex mu;
  return mu;
}
std::map<int, uint64_t>& Promised() {
  static std::map<int, uint64_t> m;
  return m;
}

}  // namespace

GpuReservation& GpuReservation::operator=(GpuReservation&& o) noexcept {
  if (this != &o) {
    Release();
    bytes_ = std::move(o.bytes_);
    o.bytes_.clear();
  }
  return *this;
}

uint64_t GpuReservation::bytes(int device) const {
  auto it = bytes_.find(device);
  return it == bytes_.end() ? 0 : it->second;
}

void GpuReservation::Release() {
  if (bytes_.empty()) return;
  std::lock_guard<std::mutex> lock(PromisedMutex());
  for (const auto& [device, n] : bytes_) {
    uint64_t& p = Promised()[device];
    p -= std::min(p, n);
  }
  bytes_.clear();
}

uint64_t GpuBytesPromised(int device) {
  std::lock_guard<std::mutex> lock(PromisedMutex());
  auto it = Promised().find(device);
  return it == Promised().end() ? 0 : it->second;
}

Result<GpuReservation> AdmitOnGpus(const std::string& model,
                                   const std::vector<std::shared_ptr<runtime::Engine>>& engines,
                                   const std::vector<size_t>& instance_engine,
                                   const std::vector<std::map<std::string, Shape>>& shape_sets,
                                   uint64_t headroom_bytes) {
  struct Need {
    uint64_t bytes = 0;
    size_t instances = 0;
    runtime::MemoryReport per_instance;  //!< device figures of one context (estimate)
    uint64_t weights = 0;                //!< the engines' device weights, already allocated
    const runtime::Backend* backend = nullptr;
  };
  std::map<int, Need> needs;
  std::vector<size_t> count(engines.size(), 0);
  for (size_t i = 0; i < instance_engine.size(); ++i) {
    if (instance_engine[i] >= engines.size())
      return InvalidArgument("model '", model, "': instance ", i, " names engine ", instance_engine[i], " of ",
                             engines.size());
    ++count[instance_engine[i]];
  }
  for (size_t k = 0; k < engines.size(); ++k) {
    runtime::Engine& e = *engines[k];
    const runtime::Backend* backend = runtime::FindBackend(e.plan().fingerprint.backend);
    if (backend == nullptr || !backend->device_memory || count[k] == 0) continue;  // a host backend
    const int device = e.options().device;
    auto estimate = e.EstimateContextMemory(shape_sets);
    if (!estimate.ok())
      return estimate.status().WithContext(
          StrCat("model '", model, "': estimating an instance's memory on GPU ", device));
    Need& n = needs[device];
    n.backend = backend;
    n.instances += count[k];
    n.bytes += estimate->Total(MemoryPlace::kDevice, device) * count[k];
    for (const runtime::MemoryFigure& f : estimate->figures())
      if (f.place == MemoryPlace::kDevice && f.device == device) n.per_instance.Add(f.kind, f.place, f.device, f.bytes);
    n.weights += e.MemoryUsage().Bytes(MemoryKind::kWeights, MemoryPlace::kDevice, device);
  }
  GpuReservation reservation;
  std::lock_guard<std::mutex> lock(PromisedMutex());
  for (const auto& [device, n] : needs) {
    auto mem = n.backend->device_memory(device);
    if (!mem.ok()) return mem.status().WithContext(StrCat("model '", model, "': free memory of GPU ", device));
    const uint64_t promised = Promised()[device];
    const uint64_t taken = promised + headroom_bytes;
    const uint64_t available = mem->free > taken ? mem->free - taken : 0;
    if (n.bytes > available) {
      std::string parts;
      for (const runtime::MemoryFigure& f : n.per_instance.figures())
        parts += StrCat(parts.empty() ? "" : ", ", runtime::MemoryKindName(f.kind), " ", runtime::BytesText(f.bytes));
      return Unavailable(
          "model '", model, "' does not fit on GPU ", device, ": its ", n.instances, " instance(s) need ",
          runtime::BytesText(n.bytes), " (each, estimated: ", parts.empty() ? "nothing" : parts, "; its weights, ",
          runtime::BytesText(n.weights), ", are loaded already), but ", runtime::BytesText(mem->free), " of ",
          runtime::BytesText(mem->total), " is free, less a headroom of ", runtime::BytesText(headroom_bytes),
          " (SAMPAN_GPU_MEMORY_HEADROOM_MIB) and ", runtime::BytesText(promised), " promised to loads in progress");
    }
  }
  for (const auto& [device, n] : needs) {
    if (n.bytes == 0) continue;
    Promised()[device] += n.bytes;
    reservation.bytes_[device] = n.bytes;
  }
  return reservation;
}

}  // namespace sampan::server
