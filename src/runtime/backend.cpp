#include "runtime/backend.h"

#include <algorithm>
#include <map>

#include "runtime/engine.h"
#include "runtime/reference_context.h"

namespace sampan::runtime {

namespace {

class ReferenceEngine : public BackendEngine {
 public:
  explicit ReferenceEngine(std::shared_ptr<const ir::Graph> graph) : graph_(std::move(graph)) {}
  Result<std::unique_ptr<ContextImpl>> CreateContext() override {
    return std::unique_ptr<ContextImpl>(std::make_unique<ReferenceContext>(graph_));
  }

 private:
  std::shared_ptr<const ir::Graph> graph_;
};

std::map<std::string, Backend>& Registry() {
  static std::map<std::string, Backend> r = [] {
    std::map<std::string, Backend> m;
    Backend ref;
    ref.name = "reference";
    ref.available = [] { return Status::Ok(); };
    ref.fingerprint = [](int) { return plan::CurrentFingerprint("reference"); };
    ref.create = [](const plan::Plan& plan, const EngineOptions&) -> Result<std::unique_ptr<BackendEngine>> {
      return std::unique_ptr<BackendEngine>(std::make_unique<ReferenceEngine>(plan.graph));
    };
    ref.device_count = [] { return 1; };
    m["reference"] = std::move(ref);
    return m;
  }();
  return r;
}

}  // namespace

void RegisterBackend(Backend backend) {
  std::string name = backend.name;
  Registry()[name] = std::move(backend);
}

const char* StreamPriorityName(StreamPriority p) {
  switch (p) {
    case StreamPriority::kHigh:
      return "high";
    case StreamPriority::kLow:
      return "low";
    case StreamPriority::kDefault:
      break;
  }
  return "default";
}

int DeviceCount(const Backend& backend) {
  return backend.device_count ? backend.device_count() : 1;
}

const Backend* FindBackend(const std::string& name) {
  auto it = Registry().find(name);
  return it == Registry().end() ? nullptr : &it->second;
}

std::vector<std::string> BackendNames() {
  std::vector<std::string> names;
  for (const auto& [n, b] : Registry()) names.push_back(n);
  return names;
}

}  // namespace sampan::runtime
