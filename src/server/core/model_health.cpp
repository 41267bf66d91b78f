#include "server/core/model_health.h"

#include <cmath>
#include <cstdlib>

#include "server/core/log.h"

namespace sampan::server {

namespace {

Result<uint64_t> Positive(const std::string& spec, const std::string& value) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || value[0] == '-' || v == 0)
    return InvalidArgument("--model-health-rule '", spec, "': '", value, "' is not a whole number >= 1");
  return static_cast<uint64_t>(v);
}

std::string Percent(double fraction) {
  const double tenths = std::round(fraction * 1000);  // one decimal at most: 20.6%
  if (std::fmod(tenths, 10) == 0) return StrCat(static_cast<int64_t>(tenths / 10), "%");
  return StrCat(static_cast<int64_t>(tenths) / 10, ".", static_cast<int64_t>(tenths) % 10, "%");
}

}  // namespace

Result<ModelHealthRules> ParseModelHealthRules(const std::vector<std::string>& specs) {
  ModelHealthRules r;
  for (const std::string& spec : specs) {
    if (spec == "default" || spec == "off") {
      r = ModelHealthRules{};
      continue;
    }
    const size_t eq = spec.find('=');
    if (eq == std::string::npos)
      return InvalidArgument("--model-health-rule '", spec, "': expected NAME=VALUE, 'default' or 'off'");
    const std::string name = spec.substr(0, eq), value = spec.substr(eq + 1);
    if (name == "error-rate") {
      std::string number = value;
      if (!number.empty() && number.back() == '%') number.pop_back();
      char* end = nullptr;
      const double p = std::strtod(number.c_str(), &end);
      if (number.empty() || *end != '\0' || !(p >= 0 && p <= 100))
        return InvalidArgument("--model-health-rule '", spec, "': '", value,
                               "' is not a percentage from 0 (off) to 100");
      r.error_rate = p / 100;
    } else if (name == "window-s") {
      SP_ASSIGN_OR_RETURN(uint64_t s, Positive(spec, value));
      r.window = std::chrono::seconds(s);
    } else if (name == "min-requests") {
      SP_ASSIGN_OR_RETURN(r.min_requests, Positive(spec, value));
    } else {
      return InvalidArgument("--model-health-rule '", spec, "': unknown rule '", name,
                             "' (expected error-rate, window-s or min-requests)");
    }
  }
  return r;
}

bool CountsAgainstModel(StatusCode code) {
  return code == StatusCode::kInternal || code == StatusCode::kIoError || code == StatusCode::kFailedPrecondition;
}

ModelErrorRates::ModelErrorRates(ModelHealthRules rules, metrics::Registry* registry)
    : rules_(rules), registry_(registry) {}

int64_t ModelErrorRates::SlotOf(Clock::time_point t) const {
  const auto slot = std::chrono::duration_cast<std::chrono::nanoseconds>(rules_.window) / kSlots;
  return t.time_since_epoch() / slot;
}

void ModelErrorRates::Expire(Model& m, int64_t now_slot) const {
  while (!m.slots.empty() && m.slots.front().index <= now_slot - kSlots) m.slots.pop_front();
}

void ModelErrorRates::Record(const std::string& model, bool failed, Clock::time_point now) {
  const int64_t s = SlotOf(now);
  std::lock_guard<std::mutex> lock(mu_);
  Model& m = models_[model];
  if (m.slots.empty() || m.slots.back().index < s) m.slots.push_back({s, 0, 0});
  // A request stamped before the newest slot (threads race to the lock) counts in the newest.
  Slot& slot = m.slots.back();
  ++slot.requests;
  if (failed) ++slot.failures;
  Evaluate(model, m, std::max(s, slot.index));
}

std::pair<uint64_t, uint64_t> ModelErrorRates::Window(const std::string& model, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(model);
  if (it == models_.end()) return {0, 0};
  Expire(it->second, SlotOf(now));
  uint64_t failures = 0, requests = 0;
  for (const Slot& s : it->second.slots) failures += s.failures, requests += s.requests;
  return {failures, requests};
}

const std::string& ModelErrorRates::Evaluate(const std::string& name, Model& m, int64_t now_slot) {
  Expire(m, now_slot);
  uint64_t failures = 0, requests = 0;
  for (const Slot& s : m.slots) failures += s.failures, requests += s.requests;
  const double rate = requests ? static_cast<double>(failures) / static_cast<double>(requests) : 0.0;
  std::string reason;
  if (rules_.on() && requests >= rules_.min_requests && failures > 0 && rate >= rules_.error_rate)
    reason =
        StrCat("model '", name, "': ", failures, " of ", requests, " requests failed in the last ",
               rules_.window.count(), " s (", Percent(rate), "; rule: error-rate=", Percent(rules_.error_rate), ")");
  // The figures change with every request; only a trip or a clear is news for the log.
  if (reason.empty() != m.reason.empty()) {
    if (!reason.empty())
      LogError("model health: ", reason, ": the server is not ready (it drains)");
    else
      LogInfo("model health: model '", name, "' is healthy again (", failures, " of ", requests,
              " requests failed in the last ", rules_.window.count(), " s)");
  }
  m.reason = reason;
  if (registry_) {
    registry_
        ->AddGauge("sampan_model_error_rate", "Failed over all requests of the model in the --model-health-rule window")
        .gauge({{"model", name}})
        .Set(rate);
    metrics::Family& tripped = registry_->AddGauge(
        "sampan_model_health_rule_tripped", "1 for each model health rule tripped on the model (readiness false)");
    const metrics::Labels l = {{"model", name}, {"rule", "error-rate"}};
    if (!m.reason.empty())
      tripped.gauge(l).Set(1);
    else
      tripped.Remove(l);
  }
  return m.reason;
}

std::string ModelErrorRates::Unhealthy(Clock::time_point now) {
  const int64_t s = SlotOf(now);
  std::lock_guard<std::mutex> lock(mu_);
  std::string all;
  for (auto& [name, m] : models_) {
    const std::string& reason = Evaluate(name, m, s);
    if (!reason.empty()) all += (all.empty() ? "" : "; ") + reason;
  }
  return all;
}

}  // namespace sampan::server
