#include "builder/backend_builder.h"

#include <algorithm>
#include <map>
#include <mutex>

namespace sampan::builder {

namespace {
std::map<std::string, BackendBuilder>& Registry() {
  static std::map<std::string, BackendBuilder> r;
  return r;
}
}  // namespace

void RegisterBackendBuilder(BackendBuilder builder) {
  std::string name = builder.name;
  Registry()[name] = std::move(builder);
}

const BackendBuilder* FindBackendBuilder(const std::string& name) {
  auto it = Registry().find(name);
  return it == Registry().end() ? nullptr : &it->second;
}

std::vector<std::string> BuildableBackends() {
  std::vector<std::string> names{"reference"};
  for (const auto& [n, b] : Registry()) names.push_back(n);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace sampan::builder
