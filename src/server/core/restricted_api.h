// Restricted APIs, as Triton's --http-restricted-api / --grpc-restricted-protocol: groups of
// endpoint categories that answer only requests carrying a header KEY with the value VALUE
// ("API[,API...]:KEY=VALUE", repeatable; a category in one group at most). Over HTTP the header
// is KEY; over gRPC the metadata key is "triton-grpc-protocol-KEY". Categories: health, metadata,
// inference, shared-memory, model-config, model-repository, statistics, trace, logging.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sampan::server {

enum class ApiCategory {
  kHealth,
  kMetadata,
  kInference,
  kSharedMemory,
  kModelConfig,
  kModelRepository,
  kStatistics,
  kTrace,
  kLogging,
};
constexpr size_t kApiCategoryCount = 9;
//! "health", "model-repository", ... (Triton's names).
const char* ApiCategoryName(ApiCategory c);

class RestrictedApis {
 public:
  struct Rule {
    std::string key;    //!< header name (HTTP) / metadata suffix (gRPC), lower case
    std::string value;  //!< compared in constant time
  };
  //! Parses the flag's values; errors name `flag`, the value and what is wrong.
  static Result<RestrictedApis> Parse(const std::vector<std::string>& specs, std::string_view flag);
  //! The rule guarding `c`, or nullptr when `c` is open.
  const Rule* Find(ApiCategory c) const {
    const auto& r = rules_[static_cast<size_t>(c)];
    return r ? &*r : nullptr;
  }
  bool empty() const;
  //! Whether `given` (the header's value, or nullopt when absent) satisfies `rule`.
  static bool Matches(const Rule& rule, std::optional<std::string_view> given);

 private:
  std::array<std::optional<Rule>, kApiCategoryCount> rules_;
};

}  // namespace sampan::server
