#include "server/core/instance_rate_limiter.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <optional>

#include "base/split.h"

namespace sampan::server {

namespace {

// A whole number in [0, max], all of `s`.
bool ParseNumber(const std::string& s, uint64_t max, uint64_t* out) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 19) return false;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (errno != 0 || v > max) return false;
  *out = v;
  return true;
}

std::string Where(int device) {
  return device < 0 ? " (global)" : StrCat(" on device ", device);
}

}  // namespace

Result<RateLimitResource> ParseRateLimitResource(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("--rate-limit-resource=", text, ": ", why,
                           " (expected <name>:<count>[:<device>], e.g. R1:2 or R1:2:0)");
  };
  const std::vector<std::string> parts = SplitFields(text, ':');
  if (parts.size() < 2 || parts.size() > 3) return bad(StrCat("has ", parts.size(), " part(s)"));
  RateLimitResource r;
  r.name = parts[0];
  if (r.name.empty()) return bad("the resource name is empty");
  uint64_t v = 0;
  if (!ParseNumber(parts[1], UINT32_MAX, &v)) return bad(StrCat("count '", parts[1], "' is not a whole number >= 0"));
  r.count = static_cast<uint32_t>(v);
  if (parts.size() == 3) {
    if (!ParseNumber(parts[2], 1u << 16, &v)) return bad(StrCat("device '", parts[2], "' is not a device number >= 0"));
    r.device = static_cast<int>(v);
  }
  return r;
}

InstanceRateLimiter::Grant& InstanceRateLimiter::Grant::operator=(Grant&& o) noexcept {
  if (this != &o) {
    Release();
    limiter_ = std::exchange(o.limiter_, nullptr);
    slot_ = o.slot_;
  }
  return *this;
}

void InstanceRateLimiter::Grant::Release() {
  if (limiter_ != nullptr) std::exchange(limiter_, nullptr)->Release(slot_);
}

InstanceRateLimiter::Group::~Group() {
  limiter_->Unregister(slots_);
}

InstanceRateLimiter::Grant InstanceRateLimiter::Group::Acquire(int instance) {
  return limiter_->Acquire(slots_.at(static_cast<size_t>(instance)));
}

std::optional<uint64_t> InstanceRateLimiter::FlagCount(const Key& key) const {
  std::optional<uint64_t> any, own;
  for (const auto& r : options_.resources) {
    if (r.name != key.second) continue;
    // A global resource has one pool: the flag's device does not apply to it (Triton).
    const bool every_device = r.device < 0 || key.first == kGlobal;
    if (!every_device && r.device != key.first) continue;
    std::optional<uint64_t>& v = every_device ? any : own;
    v = std::max<uint64_t>(v.value_or(0), r.count);
  }
  return own ? own : any;
}

void InstanceRateLimiter::UpdateCapacity() {
  capacity_.clear();
  for (const auto& [id, slot] : slots_)
    for (const auto& [key, n] : slot.needs) capacity_[key] = std::max(capacity_[key], n);
  for (auto& [key, count] : capacity_)
    if (auto flag = FlagCount(key)) count = *flag;
}

Result<std::unique_ptr<InstanceRateLimiter::Group>> InstanceRateLimiter::Register(
    const std::vector<Instance>& instances) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, bool> global;  // resource name -> declared global, across the server
  for (const auto& [id, slot] : slots_)
    for (const auto& [key, n] : slot.needs) global[key.second] = key.first == kGlobal;
  std::vector<Slot> fresh;
  for (const Instance& in : instances) {
    Slot s;
    s.priority = std::max<uint32_t>(1, in.config.priority());
    for (const auto& r : in.config.resources()) {
      auto [it, first] = global.emplace(r.name(), r.global());
      if (!first && it->second != r.global())
        return InvalidArgument(in.group, ".rate_limiter: resource '", r.name(), "' is ",
                               r.global() ? "global" : "per device", " here but ", it->second ? "global" : "per device",
                               " in a model loaded before (a resource is global everywhere or nowhere)");
      const Key key{r.global() ? kGlobal : in.device, r.name()};
      if (auto flag = FlagCount(key); flag && *flag < r.count())
        return InvalidArgument(
            in.group, ".rate_limiter: resource '", r.name(), "'", Where(key.first), " is limited to ", *flag,
            " by --rate-limit-resource, which would keep an instance that needs ", r.count(), " from ever running");
      s.needs.emplace_back(key, r.count());
    }
    fresh.push_back(std::move(s));
  }
  std::vector<uint64_t> ids;
  for (Slot& s : fresh) {
    ids.push_back(next_slot_);
    slots_.emplace(next_slot_++, std::move(s));
  }
  UpdateCapacity();
  return std::unique_ptr<Group>(new Group(shared_from_this(), std::move(ids)));
}

void InstanceRateLimiter::Unregister(const std::vector<uint64_t>& slots) {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t id : slots) slots_.erase(id);
  UpdateCapacity();
  Dispatch();
}

InstanceRateLimiter::Grant InstanceRateLimiter::Acquire(uint64_t slot) {
  std::unique_lock<std::mutex> lock(mu_);
  const Slot& s = slots_.at(slot);
  const uint64_t ticket = next_ticket_++;
  waiting_.emplace(std::make_pair(s.executions * s.priority, ticket), slot);
  Dispatch();
  cv_.wait(lock, [&] { return granted_.erase(ticket) > 0; });
  return Grant(this, slot);
}

void InstanceRateLimiter::Dispatch() {
  bool any = false;
  while (!waiting_.empty()) {
    auto head = waiting_.begin();
    const Slot& s = slots_.at(head->second);
    bool fits = true;
    for (const auto& [key, n] : s.needs)
      if (in_use_[key] + n > capacity_[key]) fits = false;
    if (!fits) break;
    for (const auto& [key, n] : s.needs) in_use_[key] += n;
    granted_.insert(head->first.second);
    waiting_.erase(head);
    any = true;
  }
  if (any) cv_.notify_all();
}

void InstanceRateLimiter::Release(uint64_t slot) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slots_.at(slot);
  for (const auto& [key, n] : s.needs) in_use_[key] -= n;
  ++s.executions;
  Dispatch();
}

}  // namespace sampan::server
