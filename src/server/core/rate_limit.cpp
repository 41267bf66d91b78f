#include "server/core/rate_limit.h"

#include <algorithm>

#include "base/status.h"

namespace sampan::server {

bool TokenBucket::Admit(double rate, Clock::time_point now) {
  const double burst = std::max(1.0, rate);
  if (tokens_ < 0) {
    tokens_ = burst;
  } else {
    const double elapsed = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min(burst, tokens_ + std::max(0.0, elapsed) * rate);
  }
  last_ = now;
  if (tokens_ < 1.0) return false;
  tokens_ -= 1.0;
  return true;
}

bool PeerRateLimiter::Admit(const std::string& peer) {
  const auto now = TokenBucket::Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (buckets_.size() >= sweep_at_) {
    for (auto it = buckets_.begin(); it != buckets_.end();)
      it = now - it->second.last() > std::chrono::minutes(1) ? buckets_.erase(it) : std::next(it);
    sweep_at_ = std::max<size_t>(1024, 2 * buckets_.size());
  }
  return buckets_[peer].Admit(rate_, now);
}

std::string RateLimitMessage(double rate) {
  return StrCat("this connection sent more than ", rate,
                " requests per second, the server's limit (--rate-limit-per-connection); retry later");
}

}  // namespace sampan::server
