// instance_group.rate_limiter in config.pbtxt: Triton's ModelRateLimiter, checked whether or not
// the server runs the rate limiter (`serve --rate-limit`), as Triton does. Counts and priority
// are unsigned in the schema, so a negative one is a parse error at its position
// (model_config.cpp); what the server has of each resource is checked when the model loads
// (server/core/instance_rate_limiter.h).
#include <map>
#include <string>

#include "server/repository/config_check.h"

namespace sampan::server {

namespace sc = ::sampan::serverconfig;
using CC = ConfigChecker;

Status CheckRateLimiter(const ConfigChecker& ck, const sc::ModelConfig& c, const ConfigChecker::Tree* root) {
  const auto* cd = sc::ModelConfig::descriptor();
  const auto* gd = sc::ModelInstanceGroup::descriptor();
  const auto* ld = sc::ModelRateLimiter::descriptor();
  const auto* rd = sc::ModelRateLimiter::Resource::descriptor();
  std::map<std::string, bool> global;  // resource name -> declared global (by the first group naming it)
  for (int i = 0; i < c.instance_group_size(); ++i) {
    const auto& g = c.instance_group(i);
    if (!g.has_rate_limiter()) continue;
    const auto* gt = CC::Sub(root, cd, "instance_group", i);
    const auto* lt = CC::Sub(gt, gd, "rate_limiter");
    const ConfigLoc group_loc = CC::First({CC::At(gt, gd, "rate_limiter"), CC::At(root, cd, "instance_group", i)});
    std::map<std::string, int> seen;  // name -> index in this group
    for (int j = 0; j < g.rate_limiter().resources_size(); ++j) {
      const auto& r = g.rate_limiter().resources(j);
      const auto* rt = CC::Sub(lt, ld, "resources", j);
      const ConfigLoc here = CC::First({CC::At(rt, rd, "name"), CC::At(lt, ld, "resources", j), group_loc});
      const std::string path = StrCat("instance_group[", i, "].rate_limiter.resources[", j, "]");
      if (r.name().empty()) return ck.Fail(here, path + ".name", "must be given");
      if (r.count() == 0)
        return ck.Fail(CC::First({CC::At(rt, rd, "count"), here}), path + ".count",
                       "must be >= 1 (an instance that needs none of a resource leaves it out)");
      if (auto [it, fresh] = seen.emplace(r.name(), j); !fresh)
        return ck.Fail(here, path + ".name",
                       StrCat("'", r.name(), "' is listed twice (also resources[", it->second, "])"));
      if (auto [it, fresh] = global.emplace(r.name(), r.global()); !fresh && it->second != r.global())
        return ck.Fail(CC::First({CC::At(rt, rd, "global"), here}), path + ".global",
                       StrCat("resource '", r.name(), "' is ", r.global() ? "global" : "per device", " here but ",
                              it->second ? "global" : "per device", " in another instance group"));
    }
  }
  return Status::Ok();
}

}  // namespace sampan::server
