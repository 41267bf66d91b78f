// Per-connection request rate limits (--rate-limit-per-connection): a token bucket per client
// connection (an HTTP keep-alive connection; a gRPC peer, i.e. its TCP connection), refilled at
// `rate` requests per second up to a burst of max(1, rate) requests. A request over the limit is
// refused at once (HTTP 429 with Retry-After, gRPC RESOURCE_EXHAUSTED), never queued.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <unordered_map>

namespace sampan::server {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;
  //! Takes one token if there is one (refilling first); false when the request is over the limit.
  bool Admit(double rate, Clock::time_point now);
  Clock::time_point last() const { return last_; }

 private:
  double tokens_ = -1;  //!< < 0: not used yet (starts full)
  Clock::time_point last_{};
};

//! Buckets by peer for front ends whose handlers see no connection object (gRPC). Buckets idle for
//! a minute are dropped when the table grows, so it stays bounded by the live connections.
class PeerRateLimiter {
 public:
  explicit PeerRateLimiter(double rate) : rate_(rate) {}
  double rate() const { return rate_; }
  bool enabled() const { return rate_ > 0; }
  bool Admit(const std::string& peer);

 private:
  double rate_;
  std::mutex mu_;
  std::unordered_map<std::string, TokenBucket> buckets_;
  size_t sweep_at_ = 1024;
};

//! The message a refused request gets.
std::string RateLimitMessage(double rate);

}  // namespace sampan::server
