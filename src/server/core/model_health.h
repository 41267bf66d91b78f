// Each model's error rate over a sliding window, and the rule that turns the server's readiness
// false while a model fails too often (issue #22), beside the GPU health rules (gpu_health.h):
// the node drains itself (the readiness probe, haproxy's check and agent take it out) when its
// models fail for a reason the GPU figures do not show.
//
// Only server-side failures count against a model (kInternal, kIoError, kFailedPrecondition: a
// run that failed); a client's bad request, a shed request (queue full), one refused while not
// ready and a cancelled one do not, so overload alone never drains a node. The rule is not
// sticky: it clears once the window holds fewer failures than it asks for. A drained node gets no
// traffic, so it clears one window after its last failure and the gateway tries it again.
//
// Metrics: sampan_model_error_rate{model} (the window's failures over its requests),
// sampan_model_health_rule_tripped{model,rule="error-rate"} (1 while tripped).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/metrics/metrics.h"

namespace sampan::server {

//! When a model's error rate makes the server not ready.
struct ModelHealthRules {
  double error_rate = 0;            //!< a fraction in (0, 1]: trip at or above it; 0 = off
  std::chrono::seconds window{10};  //!< the sliding window the rate is measured over
  uint64_t min_requests = 20;       //!< fewer requests in the window never trip the rule
  bool on() const { return error_rate > 0; }
};

//! `--model-health-rule` values, each `NAME=VALUE` (or `off`, `default`): error-rate=PCT (a
//! percentage, `50` or `50%`; 0 = off, the default), window-s=N (>= 1), min-requests=N (>= 1).
//! Each replaces that setting. Errors name the flag value and what was expected.
Result<ModelHealthRules> ParseModelHealthRules(const std::vector<std::string>& specs);

//! Whether a request that ended with `code` counts as a failure of its model (see above).
bool CountsAgainstModel(StatusCode code);

//! The per-model windows. Thread-safe; time is passed in (steady clock), so tests drive it.
class ModelErrorRates {
 public:
  using Clock = std::chrono::steady_clock;
  //! `registry` may be nullptr (no metrics).
  ModelErrorRates(ModelHealthRules rules, metrics::Registry* registry);

  //! One finished request of `model`, failed or not, at `now`.
  void Record(const std::string& model, bool failed, Clock::time_point now);
  //! "" while no model's rule trips at `now`; else why, model by model ("model 'm': 12 of 20
  //! requests failed in the last 10 s (60%; rule: error-rate=50%)"). Logs each change.
  std::string Unhealthy(Clock::time_point now);
  //! The window's (failures, requests) of `model` at `now`.
  std::pair<uint64_t, uint64_t> Window(const std::string& model, Clock::time_point now);

  const ModelHealthRules& rules() const { return rules_; }

 private:
  // The window is kSlots slots; a slot's counts leave the window whole.
  static constexpr int64_t kSlots = 10;
  struct Slot {
    int64_t index = 0;
    uint64_t requests = 0, failures = 0;
  };
  struct Model {
    std::deque<Slot> slots;  // increasing index, the last kSlots at most
    std::string reason;      // "" healthy
  };
  int64_t SlotOf(Clock::time_point t) const;
  void Expire(Model& m, int64_t now_slot) const;
  // Updates m's reason (logging a change) and metrics; returns the reason.
  const std::string& Evaluate(const std::string& name, Model& m, int64_t now_slot);

  ModelHealthRules rules_;
  metrics::Registry* registry_;
  std::mutex mu_;
  std::map<std::string, Model> models_;
};

}  // namespace sampan::server
