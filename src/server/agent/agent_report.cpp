#include "server/agent/agent_report.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "base/split.h"
#include "runtime/backend.h"
#include "server/core/model_loader.h"

namespace sampan::server {

namespace sc = serverconfig;

Result<AgentQuery> ParseAgentQuery(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  AgentQuery q;
  bool has_unit = false;
  for (const std::string& word : SplitFields(std::string(line), ' ')) {
    if (word.empty()) continue;
    const size_t eq = word.find('=');
    const std::string key = word.substr(0, eq == std::string::npos ? word.size() : eq);
    const std::string value = eq == std::string::npos ? "" : word.substr(eq + 1);
    if (key == "model" && eq != std::string::npos && !value.empty()) {
      q.model = value;
    } else if (key == "unit" && eq != std::string::npos) {
      char* end = nullptr;
      q.unit = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !std::isfinite(q.unit) || q.unit <= 0)
        return InvalidArgument("agent-send word '", word,
                               "': unit must be a positive number (rows per second per "
                               "weight point)");
      has_unit = true;
    } else {
      return InvalidArgument("agent-send word '", word, "': expected model=NAME [unit=ROWS_PER_S]");
    }
  }
  if (has_unit && q.model.empty()) return InvalidArgument("agent-send '", line, "': unit= without model=NAME");
  return q;
}

std::optional<double> ServiceRate::Update(std::chrono::steady_clock::time_point now, uint64_t rows, uint64_t busy_ns) {
  if (!samples_.empty() && (rows < samples_.back().rows || busy_ns < samples_.back().busy_ns)) samples_.clear();
  // The first sample of a window has nothing before it: the counters since load are the estimate.
  if (samples_.empty() && rows > 0 && busy_ns > 0)
    last_ = static_cast<double>(rows) / (static_cast<double>(busy_ns) / 1e9);
  // Checks closer than 20 ms apart (several gateways) share a sample: the window stays small.
  if (samples_.size() > 1 && now - samples_.back().t < std::chrono::milliseconds(20))
    samples_.back() = {now, rows, busy_ns};
  else
    samples_.push_back({now, rows, busy_ns});
  // Keep one sample at or before the window's start, so the window is covered whole.
  while (samples_.size() > 2 && samples_[1].t <= now - window_) samples_.erase(samples_.begin());
  const Sample& first = samples_.front();
  const uint64_t d_rows = rows - first.rows, d_ns = busy_ns - first.busy_ns;
  if (d_rows > 0 && d_ns > 0) last_ = static_cast<double>(d_rows) / (static_cast<double>(d_ns) / 1e9);
  return last_;
}

int RateWeight(double rows_per_s, double unit) {
  if (!(rows_per_s > 0) || !(unit > 0)) return 1;
  const double w = std::round(rows_per_s / unit);
  return w >= 256 ? 256 : std::max(1, static_cast<int>(w));
}

std::string ModelReply(const AgentState& node, const std::string& model, const ModelSnapshot& snapshot,
                       std::optional<double> rate, double unit) {
  if (node.shutting_down || !node.ready) return AgentReply(node);
  if (!snapshot.found) return StrCat("down #model ", model, " is not in the repository\n");
  if (!snapshot.ready) return StrCat("down #model ", model, " not ready\n");
  if (!rate) return "up ready\n";  // nothing measured yet: haproxy keeps the weight it has
  return StrCat("up ready ", RateWeight(*rate * snapshot.instances, unit), "%\n");
}

ModelSnapshot AgentReporter::Snapshot(const std::string& model) const {
  ModelSnapshot s;
  Result<bool> ready = core_.ModelReady(model, "");
  if (!ready.ok() && ready.status().code() == StatusCode::kNotFound) {
    // Unknown as a version, or unknown as a model: the repository index tells.
    for (const RepositoryEntry& e : core_.RepositoryIndex(false))
      if (e.name == model) s.found = true;
    return s;
  }
  s.found = true;
  s.ready = ready.ok() && ready.value();
  if (auto stats = core_.Statistics(model, ""); stats.ok()) {
    for (const ModelStats& v : stats.value())
      for (const BatchStat& b : v.batch_stats) {
        s.rows += b.batch_size * b.compute_infer.count;
        s.busy_ns += b.compute_input.ns + b.compute_infer.ns + b.compute_output.ns;
      }
  }
  // Instances as the loader places them: a CPU group's count, other kinds' count on each device
  // they name (every device of their backend when they name none).
  if (auto config = core_.GetModelConfig(model, ""); config.ok()) {
    int instances = 0;
    for (const sc::ModelInstanceGroup& g : config.value().instance_group()) {
      int devices = 1;
      if (g.kind() != sc::ModelInstanceGroup::KIND_CPU) {
        if (g.gpus_size() > 0) {
          devices = g.gpus_size();
        } else if (auto backend = ChooseBackend(config.value(), g.kind(), options_.default_backend); backend.ok()) {
          if (const runtime::Backend* b = runtime::FindBackend(backend.value())) devices = runtime::DeviceCount(*b);
        }
      }
      instances += std::max(1, g.count()) * std::max(1, devices);
    }
    s.instances = std::max(1, instances);
  }
  return s;
}

std::string AgentReporter::Reply(std::string_view query) {
  const AgentState node = AgentStateOf(core_);
  Result<AgentQuery> q = ParseAgentQuery(query);
  if (!q.ok()) {
    // haproxy shows what follows '#' on its stats page; the node's own state still decides.
    std::string line = AgentReply(node);
    line.pop_back();
    return StrCat(line, " #", q.status().message(), "\n");
  }
  if (q.value().model.empty()) return AgentReply(node);
  const ModelSnapshot s = Snapshot(q.value().model);
  std::optional<double> rate;
  if (s.ready) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = rates_.try_emplace(q.value().model, options_.window).first;
    rate = it->second.Update(std::chrono::steady_clock::now(), s.rows, s.busy_ns);
  }
  return ModelReply(node, q.value().model, s, rate, q.value().unit);
}

}  // namespace sampan::server
