#include "server/core/restricted_api.h"

#include <algorithm>
#include <cctype>

#include "server/core/secret.h"

namespace sampan::server {
namespace {

constexpr std::array<const char*, kApiCategoryCount> kNames = {"health",        "metadata",     "inference",
                                                               "shared-memory", "model-config", "model-repository",
                                                               "statistics",    "trace",        "logging"};

std::string Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

// An HTTP header name / gRPC metadata key: RFC 7230 token characters (gRPC keys are lower case).
bool ValidKey(std::string_view k) {
  if (k.empty()) return false;
  return std::all_of(k.begin(), k.end(), [](char ch) {
    const unsigned char c = static_cast<unsigned char>(ch);
    return std::isalnum(c) || c == '-' || c == '_' || c == '.';
  });
}

}  // namespace

const char* ApiCategoryName(ApiCategory c) {
  return kNames[static_cast<size_t>(c)];
}

Result<RestrictedApis> RestrictedApis::Parse(const std::vector<std::string>& specs, std::string_view flag) {
  RestrictedApis out;
  for (const std::string& spec : specs) {
    auto bad = [&](auto&&... why) { return InvalidArgument(flag, " '", spec, "': ", why...); };
    const size_t colon = spec.find(':');  // API names hold no ':'; a value may
    if (colon == std::string::npos) return bad("expected API[,API...]:KEY=VALUE");
    const std::string_view head(spec.data(), colon);
    const std::string_view tail(spec.data() + colon + 1, spec.size() - colon - 1);
    const size_t eq = tail.find('=');
    if (eq == std::string_view::npos) return bad("expected KEY=VALUE after ':'");
    Rule rule;
    rule.key = Trim(tail.substr(0, eq));
    rule.value = std::string(tail.substr(eq + 1));
    std::transform(rule.key.begin(), rule.key.end(), rule.key.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (!ValidKey(rule.key))
      return bad("the key '", rule.key, "' is not a header name (letters, digits, '-', '_', '.')");
    if (rule.value.empty()) return bad("the value is empty");
    size_t start = 0;
    bool any = false;
    while (start <= head.size()) {
      const size_t comma = std::min(head.find(',', start), head.size());
      const std::string name = Trim(head.substr(start, comma - start));
      start = comma + 1;
      if (name.empty()) continue;
      auto it = std::find_if(kNames.begin(), kNames.end(), [&](const char* n) { return name == n; });
      if (it == kNames.end()) {
        std::string names;
        for (const char* n : kNames) names += (names.empty() ? "" : ", ") + std::string(n);
        return bad("unknown API '", name, "' (one of: ", names, ")");
      }
      auto& slot = out.rules_[static_cast<size_t>(it - kNames.begin())];
      if (slot) return bad("API '", name, "' is already in another restricted group");
      slot = rule;
      any = true;
    }
    if (!any) return bad("no API named before ':'");
  }
  return out;
}

bool RestrictedApis::empty() const {
  return std::none_of(rules_.begin(), rules_.end(), [](const auto& r) { return r.has_value(); });
}

bool RestrictedApis::Matches(const Rule& rule, std::optional<std::string_view> given) {
  return given && SecretEquals(*given, rule.value);
}

}  // namespace sampan::server
