// Canary releases (`sampan publish --canary P`): a newly published version takes P% of its
// model's unversioned requests next to the version that served before it (the baseline).
// Over a window the server compares the two arms, error rates and p99 latencies, and promotes
// the new version or rolls it back by itself (server::Core acts on the verdict).
//
// The release is described by the version's report.json ("canary" object, written by
// `sampan publish`); the verdict is kept in <version>/.sampan/canary-decision.json, written
// once by the first server to decide (replicas sharing a repository adopt it), so a restart
// or another replica does not run the canary again. Hidden files do not change a model's
// fingerprint: writing the decision does not make the poll reload the model.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace sampan::server {

struct CanaryPolicy {
  int64_t version = 0;   //!< the new version (the one whose report.json holds this)
  int64_t baseline = 0;  //!< the version it is judged against
  double percent = 10;   //!< share of unversioned requests it takes, 0 < percent < 100
  double window_secs = 60;
  int64_t min_requests = 20;              //!< canary requests a verdict needs
  double max_error_rate_increase = 0.01;  //!< canary error rate minus the baseline's, at most
  double max_p99_ratio = 1.5;             //!< canary p99 over the baseline's, at most ...
  double p99_slack_ms = 1.0;              //!< ... unless the two differ by less than this
};

//! The "canary" object of <version_dir>/report.json: nullopt when the file or the object is
//! absent; an error naming the file and the field when it is malformed.
Result<std::optional<CanaryPolicy>> ReadCanaryPolicy(const std::string& version_dir, int64_t version);
//! The object as report.json holds it (`sampan publish` writes it with this).
std::string CanaryPolicyJson(const CanaryPolicy& p);

struct CanaryDecision {
  bool promoted = false;  //!< false: rolled back
  std::string reason;
};
//! <version_dir>/.sampan/canary-decision.json, nullopt when none was written.
Result<std::optional<CanaryDecision>> ReadCanaryDecision(const std::string& version_dir);
//! The newest version of <model_dir> that no canary decision rolled back (0: none): the one that
//! serves unversioned requests once canaries are decided, for tools that read a repository.
int64_t NewestNotRolledBack(const std::string& model_dir);
//! Writes the decision unless one is there already (kFailedPrecondition then: read that one).
//! The decision names the version's report.json by hash: a decision left by an earlier version of
//! the same number (moved out and published again) is not this version's, and reads as none.
Status WriteCanaryDecision(const std::string& version_dir, const CanaryDecision& d);

//! What one arm answered during the window.
struct ArmStats {
  int64_t requests = 0;
  int64_t errors = 0;              //!< every answer but success and a client's cancellation
  std::vector<double> latency_ms;  //!< of successful requests (a bounded reservoir)
  double ErrorRate() const { return requests == 0 ? 0 : static_cast<double>(errors) / static_cast<double>(requests); }
  double P99() const;           //!< nearest rank; 0 when empty
  std::string Summary() const;  //!< "120 requests, 0 errors, p99 2.10 ms"
};

enum class CanaryVerdict { kWait, kPromote, kRollBack };
struct CanaryJudgement {
  CanaryVerdict verdict = CanaryVerdict::kWait;
  std::string why;
};

//! The rule: roll back as soon as the canary has 5 errors and its error rate exceeds the
//! baseline's by more than max_error_rate_increase; otherwise wait for the window and for
//! min_requests canary requests, then roll back on that error-rate rule or when its p99 is over
//! max_p99_ratio times the baseline's (and over it by p99_slack_ms), else promote. The p99 is of
//! successful requests; while an arm has fewer than 100 of them, p90 stands in for it. A canary
//! that still lacks min_requests after ten windows is rolled back (too little traffic to judge).
CanaryJudgement JudgeCanary(const CanaryPolicy& p, const ArmStats& baseline, const ArmStats& canary,
                            double elapsed_secs);

//! One running canary: the request split and the window's statistics (thread safe).
class Canary {
 public:
  //! `key`: what the two arms are (their sources); a reload that keeps the key keeps the window.
  Canary(CanaryPolicy policy, bool baseline_kept_for_canary, std::string key)
      : policy_(policy),
        baseline_extra_(baseline_kept_for_canary),
        key_(std::move(key)),
        start_(std::chrono::steady_clock::now()) {}
  const std::string& key() const { return key_; }
  const CanaryPolicy& policy() const { return policy_; }
  //! The baseline serves only because of the canary (the version policy alone would retire it).
  bool baseline_extra() const { return baseline_extra_; }
  //! The split: true for the requests that go to the canary, exactly percent of them in order.
  bool TakeCanary();
  void Record(bool to_canary, bool ok, double latency_ms);
  CanaryJudgement Evaluate() const;
  double elapsed_secs() const;

 private:
  static constexpr size_t kReservoir = 20000;
  const CanaryPolicy policy_;
  const bool baseline_extra_;
  const std::string key_;
  const std::chrono::steady_clock::time_point start_;
  std::atomic<uint64_t> taken_{0};
  mutable std::mutex mu_;
  ArmStats arms_[2];  // [0] baseline, [1] canary
  uint64_t seen_[2] = {0, 0};
  uint64_t rng_ = 0x9E3779B97F4A7C15ull;
};

}  // namespace sampan::server
