#include "server/core/canary.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "base/file_util.h"
#include "base/report_util.h"
#include "plan/plan.h"
#include "server/repository/repository.h"

namespace sampan::server {

namespace fs = std::filesystem;

namespace {

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

Result<rapidjson::Document> ParseJsonFile(const std::string& path, const std::string& text) {
  rapidjson::Document doc;
  doc.Parse(text.data(), text.size());
  if (doc.HasParseError())
    return InvalidArgument(path, ": not JSON (", rapidjson::GetParseError_En(doc.GetParseError()), " at byte ",
                           doc.GetErrorOffset(), ")");
  if (!doc.IsObject()) return InvalidArgument(path, ": not a JSON object");
  return doc;
}

}  // namespace

Result<std::optional<CanaryPolicy>> ReadCanaryPolicy(const std::string& version_dir, int64_t version) {
  const std::string path = (fs::path(version_dir) / "report.json").string();
  auto text = ReadFileBytes(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) return std::optional<CanaryPolicy>();
    return text.status();
  }
  SP_ASSIGN_OR_RETURN(rapidjson::Document doc, ParseJsonFile(path, *text));
  auto it = doc.FindMember("canary");
  if (it == doc.MemberEnd() || it->value.IsNull()) return std::optional<CanaryPolicy>();
  if (!it->value.IsObject()) return InvalidArgument(path, ": \"canary\" is not an object");
  const auto& c = it->value;
  CanaryPolicy p;
  p.version = version;
  auto number = [&](const char* field, double* out, bool required, double lo, double hi, bool lo_open) -> Status {
    auto f = c.FindMember(field);
    if (f == c.MemberEnd()) {
      if (required) return InvalidArgument(path, ": canary.", field, " is missing");
      return Status::Ok();
    }
    if (!f->value.IsNumber()) return InvalidArgument(path, ": canary.", field, " is not a number");
    const double v = f->value.GetDouble();
    if (!std::isfinite(v) || v > hi || (lo_open ? v <= lo : v < lo))
      return InvalidArgument(path, ": canary.", field, " = ", v, " is outside ", lo_open ? "(" : "[", lo, ", ", hi,
                             hi == 100 ? ")" : "]");
    *out = v;
    return Status::Ok();
  };
  for (auto m = c.MemberBegin(); m != c.MemberEnd(); ++m) {
    static const char* kKnown[] = {
        "percent",       "window_secs", "baseline_version", "min_requests", "max_error_rate_increase",
        "max_p99_ratio", "p99_slack_ms"};
    bool known = false;
    for (const char* k : kKnown) known |= m->name.GetString() == std::string(k);
    if (!known) return InvalidArgument(path, ": canary.", m->name.GetString(), " is not a canary field");
  }
  double baseline = 0, min_requests = static_cast<double>(p.min_requests);
  SP_RETURN_IF_ERROR(number("percent", &p.percent, true, 0, 100, true));
  if (p.percent >= 100) return InvalidArgument(path, ": canary.percent must be below 100 (the baseline needs traffic)");
  SP_RETURN_IF_ERROR(number("baseline_version", &baseline, true, 1, 9.0e15, false));
  SP_RETURN_IF_ERROR(number("window_secs", &p.window_secs, false, 0, 86400.0 * 7, true));
  SP_RETURN_IF_ERROR(number("min_requests", &min_requests, false, 1, 1.0e12, false));
  SP_RETURN_IF_ERROR(number("max_error_rate_increase", &p.max_error_rate_increase, false, 0, 1, false));
  SP_RETURN_IF_ERROR(number("max_p99_ratio", &p.max_p99_ratio, false, 1, 1.0e6, false));
  SP_RETURN_IF_ERROR(number("p99_slack_ms", &p.p99_slack_ms, false, 0, 1.0e9, false));
  if (baseline != std::floor(baseline)) return InvalidArgument(path, ": canary.baseline_version is not an integer");
  p.baseline = static_cast<int64_t>(baseline);
  if (p.baseline >= version)
    return InvalidArgument(path, ": canary.baseline_version ", p.baseline, " is not older than version ", version);
  p.min_requests = static_cast<int64_t>(min_requests);
  return std::optional<CanaryPolicy>(p);
}

std::string CanaryPolicyJson(const CanaryPolicy& p) {
  return StrCat("{\"percent\": ", Num(p.percent), ", \"baseline_version\": ", p.baseline,
                ", \"window_secs\": ", Num(p.window_secs), ", \"min_requests\": ", p.min_requests,
                ", \"max_error_rate_increase\": ", Num(p.max_error_rate_increase),
                ", \"max_p99_ratio\": ", Num(p.max_p99_ratio), ", \"p99_slack_ms\": ", Num(p.p99_slack_ms), "}");
}

namespace {
std::string DecisionPath(const std::string& version_dir) {
  return (fs::path(version_dir) / ".sampan" / "canary-decision.json").string();
}
// Which release a decision is about: a hash of the version's report.json ("none" without one).
std::string ReportHash(const std::string& version_dir) {
  auto bytes = ReadFileBytes((fs::path(version_dir) / "report.json").string());
  if (!bytes.ok()) return "none";
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(plan::Hash64(bytes->data(), bytes->size())));
  return buf;
}
}  // namespace

Result<std::optional<CanaryDecision>> ReadCanaryDecision(const std::string& version_dir) {
  const std::string path = DecisionPath(version_dir);
  auto text = ReadFileBytes(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) return std::optional<CanaryDecision>();
    return text.status();
  }
  SP_ASSIGN_OR_RETURN(rapidjson::Document doc, ParseJsonFile(path, *text));
  auto d = doc.FindMember("decision");
  if (d == doc.MemberEnd() || !d->value.IsString())
    return InvalidArgument(path, ": \"decision\" is missing or not a string");
  const std::string decision = d->value.GetString();
  if (decision != "promoted" && decision != "rolled_back")
    return InvalidArgument(path, ": decision '", decision, "' is neither 'promoted' nor 'rolled_back'");
  auto report = doc.FindMember("report");
  if (report != doc.MemberEnd() && report->value.IsString() && report->value.GetString() != ReportHash(version_dir))
    return std::optional<CanaryDecision>();  // about an earlier release of this number
  CanaryDecision out;
  out.promoted = decision == "promoted";
  auto r = doc.FindMember("reason");
  if (r != doc.MemberEnd() && r->value.IsString()) out.reason = r->value.GetString();
  return std::optional<CanaryDecision>(out);
}

int64_t NewestNotRolledBack(const std::string& model_dir) {
  const std::vector<int64_t> versions = ListVersions(model_dir);
  for (auto it = versions.rbegin(); it != versions.rend(); ++it) {
    auto d = ReadCanaryDecision((fs::path(model_dir) / std::to_string(*it)).string());
    if (!(d.ok() && *d && !(*d)->promoted)) return *it;
  }
  return 0;
}

Status WriteCanaryDecision(const std::string& version_dir, const CanaryDecision& d) {
  const std::string path = DecisionPath(version_dir);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return IoError("cannot create ", fs::path(path).parent_path().string(), ": ", ec.message());
  return WriteFileOnce(path, StrCat("{\"decision\": \"", d.promoted ? "promoted" : "rolled_back", "\", \"report\": \"",
                                    ReportHash(version_dir), "\", \"reason\": ", JsonQuote(d.reason), "}\n"));
}

double ArmStats::P99() const {
  return NearestRankPercentile(latency_ms, 99);
}

std::string ArmStats::Summary() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%lld requests, %lld errors (%.2f%%), p99 %.2f ms", static_cast<long long>(requests),
                static_cast<long long>(errors), 100.0 * ErrorRate(), P99());
  return buf;
}

CanaryJudgement JudgeCanary(const CanaryPolicy& p, const ArmStats& baseline, const ArmStats& canary,
                            double elapsed_secs) {
  const std::string arms = StrCat("canary: ", canary.Summary(), "; baseline: ", baseline.Summary());
  const bool errors_worse = canary.ErrorRate() - baseline.ErrorRate() > p.max_error_rate_increase;
  if (errors_worse && canary.errors >= 5)
    return {CanaryVerdict::kRollBack,
            StrCat("error rate above the baseline's by more than ", 100 * p.max_error_rate_increase, "% (", arms, ")")};
  if (elapsed_secs < p.window_secs)
    return {CanaryVerdict::kWait, StrCat("window ", elapsed_secs, " of ", p.window_secs, " s (", arms, ")")};
  if (canary.requests < p.min_requests && elapsed_secs >= 10 * p.window_secs)
    return {CanaryVerdict::kRollBack, StrCat("too little traffic to judge: ", canary.requests, " of ", p.min_requests,
                                             " canary requests in ten windows (", arms, ")")};
  if (canary.requests < p.min_requests)
    return {CanaryVerdict::kWait, StrCat("window over, waiting for ", p.min_requests, " canary requests (", arms, ")")};
  if (errors_worse)
    return {CanaryVerdict::kRollBack,
            StrCat("error rate above the baseline's by more than ", 100 * p.max_error_rate_increase, "% (", arms, ")")};
  // The tail compared is p99 once both arms hold 100 successful requests; before that the p99 is
  // one or two samples, and one scheduling hiccup would decide, so p90 stands in.
  const bool p99 = canary.latency_ms.size() >= 100 && baseline.latency_ms.size() >= 100;
  const double cp = NearestRankPercentile(canary.latency_ms, p99 ? 99 : 90);
  const double bp = NearestRankPercentile(baseline.latency_ms, p99 ? 99 : 90);
  if (!baseline.latency_ms.empty() && cp > bp * p.max_p99_ratio && cp - bp > p.p99_slack_ms)
    return {CanaryVerdict::kRollBack, StrCat(p99 ? "p99" : "p90 (under 100 requests an arm)", " over ", p.max_p99_ratio,
                                             "x the baseline's (", arms, ")")};
  return {CanaryVerdict::kPromote, arms};
}

bool Canary::TakeCanary() {
  // Request n goes to the canary when floor((n + 1) p / 100) > floor(n p / 100): exactly p% of
  // every run of requests, spread evenly.
  const uint64_t n = taken_.fetch_add(1, std::memory_order_relaxed);
  const double p = policy_.percent / 100.0;
  return std::floor(static_cast<double>(n + 1) * p) > std::floor(static_cast<double>(n) * p);
}

void Canary::Record(bool to_canary, bool ok, double latency_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  ArmStats& a = arms_[to_canary ? 1 : 0];
  ++a.requests;
  if (!ok) {
    ++a.errors;
    return;
  }
  // Reservoir sampling keeps the p99 of a long window in bounded memory.
  uint64_t& seen = seen_[to_canary ? 1 : 0];
  ++seen;
  if (a.latency_ms.size() < kReservoir) {
    a.latency_ms.push_back(latency_ms);
    return;
  }
  rng_ ^= rng_ << 13, rng_ ^= rng_ >> 7, rng_ ^= rng_ << 17;
  const uint64_t slot = rng_ % seen;
  if (slot < kReservoir) a.latency_ms[slot] = latency_ms;
}

double Canary::elapsed_secs() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

CanaryJudgement Canary::Evaluate() const {
  std::lock_guard<std::mutex> lock(mu_);
  return JudgeCanary(policy_, arms_[0], arms_[1], elapsed_secs());
}

}  // namespace sampan::server
