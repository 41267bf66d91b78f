// Triton's rate limiter (`serve --rate-limit=execution_count`): an instance of a model starts an
// execution only when the resources its instance group declares (config.pbtxt
// instance_group.rate_limiter.resources) are free, across every model the server runs.
//
// Resources are per device (an instance draws from its own device's pool; KIND_CPU instances
// from device 0's, as in Triton) unless declared `global: true` (one pool for the server). A
// resource's count is what --rate-limit-resource gives it (for its device, else for every
// device), else the most any one registered instance needs. Instances waiting for resources are
// served in order of exec_count x max(priority, 1) (priority is a weight: an instance of
// priority 2 gets half the turns of one of priority 1), then of arrival; the first in line
// that does not fit holds back the ones after it, so a large need is not starved.
//
// With --rate-limit=off (the default) nothing is registered and executions start as soon as an
// instance is free; the config field is still validated (model_config.cpp), as Triton does.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "model_config.pb.h"

namespace sampan::server {

//! One --rate-limit-resource=<name>:<count>[:<device>].
struct RateLimitResource {
  std::string name;
  uint32_t count = 0;
  int device = -1;  //!< -1: every device (and a global resource of that name)
};

//! Parses a --rate-limit-resource value; the error names the flag, the value and what is wrong.
Result<RateLimitResource> ParseRateLimitResource(const std::string& text);

struct RateLimiterOptions {
  bool execution_count = false;  //!< --rate-limit=execution_count (false: off)
  std::vector<RateLimitResource> resources;
};

class InstanceRateLimiter : public std::enable_shared_from_this<InstanceRateLimiter> {
 public:
  //! What one instance declares: its device and its group's rate_limiter ("instance_group[0]"
  //! says which group, for messages).
  struct Instance {
    int device = 0;
    serverconfig::ModelRateLimiter config;
    std::string group;
  };

  //! Resources held by one execution; given back when destroyed or Release()d. Empty (holds
  //! nothing) when default-constructed.
  class Grant {
   public:
    Grant() = default;
    Grant(Grant&& o) noexcept : limiter_(std::exchange(o.limiter_, nullptr)), slot_(o.slot_) {}
    Grant& operator=(Grant&& o) noexcept;
    ~Grant() { Release(); }
    void Release();

   private:
    friend class InstanceRateLimiter;
    Grant(InstanceRateLimiter* limiter, uint64_t slot) : limiter_(limiter), slot_(slot) {}
    InstanceRateLimiter* limiter_ = nullptr;
    uint64_t slot_ = 0;
  };

  //! A model version's registered instances; unregisters them when destroyed (after the
  //! version's scheduler stopped: none of them waits or holds anything then).
  class Group {
   public:
    ~Group();
    //! Blocks until `instance`'s resources are free and it is first in line.
    Grant Acquire(int instance);

   private:
    friend class InstanceRateLimiter;
    Group(std::shared_ptr<InstanceRateLimiter> limiter, std::vector<uint64_t> slots)
        : limiter_(std::move(limiter)), slots_(std::move(slots)) {}
    std::shared_ptr<InstanceRateLimiter> limiter_;
    std::vector<uint64_t> slots_;  // per instance
  };

  //! Held by a shared_ptr: make_shared<InstanceRateLimiter>(options).
  explicit InstanceRateLimiter(RateLimiterOptions options) : options_(std::move(options)) {}
  bool enabled() const { return options_.execution_count; }
  //! Instances waiting for their resources now.
  size_t waiting() const {
    std::lock_guard<std::mutex> lock(mu_);
    return waiting_.size();
  }

  //! Registers a version's instances. Fails
  //! (kInvalidArgument) when --rate-limit-resource gives a resource fewer than an instance
  //! needs, or a resource is global in one model and per device in another. The limiter is
  //! held through a shared_ptr (the group keeps it).
  Result<std::unique_ptr<Group>> Register(const std::vector<Instance>& instances);

 private:
  static constexpr int kGlobal = -2;        // the device key of global resources
  using Key = std::pair<int, std::string>;  // (device or kGlobal, resource name)
  struct Slot {
    uint32_t priority = 1;  // max(config priority, 1)
    std::vector<std::pair<Key, uint64_t>> needs;
    uint64_t executions = 0;
  };

  // What --rate-limit-resource gives `key` (nullopt: the flag does not name it).
  std::optional<uint64_t> FlagCount(const Key& key) const;
  // Under mu_: capacities from the flag and the registered needs.
  void UpdateCapacity();
  // Under mu_: grants the waiters at the head of the line while their needs fit.
  void Dispatch();
  void Release(uint64_t slot);
  void Unregister(const std::vector<uint64_t>& slots);
  Grant Acquire(uint64_t slot);

  const RateLimiterOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_slot_ = 1, next_ticket_ = 0;
  std::map<uint64_t, Slot> slots_;
  std::map<Key, uint64_t> capacity_, in_use_;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> waiting_;  // (executions x priority, ticket) -> slot
  std::set<uint64_t> granted_;                                 // tickets granted, not yet taken by their waiter
};

}  // namespace sampan::server
