// Canary releases (server/core/canary.h): the request split, the verdict rule, report.json's
// canary object (and the errors naming a malformed field), the decision file written once.
#include "server/core/canary.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "base/file_util.h"

namespace sampan::server {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("sampan_canary_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

ArmStats Arm(int64_t requests, int64_t errors, double latency_ms) {
  ArmStats a;
  a.requests = requests;
  a.errors = errors;
  a.latency_ms.assign(static_cast<size_t>(requests - errors), latency_ms);
  return a;
}

TEST(Canary, SplitTakesExactlyThePercentageSpreadEvenly) {
  for (double percent : {1.0, 10.0, 25.0, 33.0, 50.0, 99.0}) {
    CanaryPolicy p;
    p.percent = percent;
    Canary c(p, false, "");
    int taken = 0, longest_gap = 0, gap = 0;
    for (int i = 0; i < 1000; ++i) {
      if (c.TakeCanary()) {
        ++taken;
        gap = 0;
      } else {
        longest_gap = std::max(longest_gap, ++gap);
      }
    }
    EXPECT_EQ(taken, static_cast<int>(percent * 10)) << percent;
    EXPECT_LE(longest_gap, static_cast<int>(100 / percent) + 1) << percent;  // no bursts
  }
}

TEST(Canary, WaitsForTheWindowAndTheRequestsThenPromotes) {
  CanaryPolicy p;
  p.window_secs = 10;
  p.min_requests = 20;
  EXPECT_EQ(JudgeCanary(p, Arm(900, 0, 2), Arm(100, 0, 2), 5).verdict, CanaryVerdict::kWait);
  const CanaryJudgement few = JudgeCanary(p, Arm(900, 0, 2), Arm(10, 0, 2), 11);
  EXPECT_EQ(few.verdict, CanaryVerdict::kWait);
  EXPECT_NE(few.why.find("waiting for 20 canary requests"), std::string::npos) << few.why;
  const CanaryJudgement starved = JudgeCanary(p, Arm(900, 0, 2), Arm(10, 0, 2), 100);  // ten windows
  EXPECT_EQ(starved.verdict, CanaryVerdict::kRollBack);
  EXPECT_NE(starved.why.find("too little traffic to judge: 10 of 20"), std::string::npos) << starved.why;
  const CanaryJudgement ok = JudgeCanary(p, Arm(900, 1, 2), Arm(100, 0, 2.5), 11);
  EXPECT_EQ(ok.verdict, CanaryVerdict::kPromote) << ok.why;
  EXPECT_NE(ok.why.find("canary: 100 requests, 0 errors"), std::string::npos) << ok.why;
}

TEST(Canary, ErrorsRollBackEarlyAndAtTheEnd) {
  CanaryPolicy p;
  p.window_secs = 60;
  // Five errors above the baseline's rate: rolled back at once, mid-window.
  const CanaryJudgement early = JudgeCanary(p, Arm(100, 0, 2), Arm(8, 5, 2), 1);
  EXPECT_EQ(early.verdict, CanaryVerdict::kRollBack);
  EXPECT_NE(early.why.find("error rate above the baseline's"), std::string::npos) << early.why;
  // Four errors wait for the window; then 4 / 40 = 10% against 1% rolls back.
  EXPECT_EQ(JudgeCanary(p, Arm(1000, 10, 2), Arm(40, 4, 2), 30).verdict, CanaryVerdict::kWait);
  EXPECT_EQ(JudgeCanary(p, Arm(1000, 10, 2), Arm(40, 4, 2), 61).verdict, CanaryVerdict::kRollBack);
  // The same error rate as the baseline is not the canary's fault.
  EXPECT_EQ(JudgeCanary(p, Arm(1000, 100, 2), Arm(100, 10, 2), 61).verdict, CanaryVerdict::kPromote);
}

TEST(Canary, SlowCanaryRollsBackButNoiseBelowTheSlackDoesNot) {
  CanaryPolicy p;
  p.window_secs = 1;
  const CanaryJudgement slow = JudgeCanary(p, Arm(500, 0, 4), Arm(150, 0, 9), 2);
  EXPECT_EQ(slow.verdict, CanaryVerdict::kRollBack);
  EXPECT_NE(slow.why.find("p99 over 1.5x"), std::string::npos) << slow.why;
  // Under 100 requests an arm, p90: one slow request in 50 does not decide, six do.
  ArmStats hiccup = Arm(50, 0, 1);
  hiccup.latency_ms[7] = 40;
  EXPECT_EQ(JudgeCanary(p, Arm(500, 0, 1), hiccup, 2).verdict, CanaryVerdict::kPromote);
  for (int i = 0; i < 6; ++i) hiccup.latency_ms[static_cast<size_t>(i)] = 40;
  const CanaryJudgement slow90 = JudgeCanary(p, Arm(500, 0, 1), hiccup, 2);
  EXPECT_EQ(slow90.verdict, CanaryVerdict::kRollBack);
  EXPECT_NE(slow90.why.find("p90 (under 100 requests an arm) over"), std::string::npos) << slow90.why;
  EXPECT_EQ(JudgeCanary(p, Arm(500, 0, 0.2), Arm(50, 0, 0.9), 2).verdict, CanaryVerdict::kPromote);  // +0.7 ms
}

TEST(Canary, RecordsBothArms) {
  CanaryPolicy p;
  p.window_secs = 0.05;
  p.min_requests = 3;
  Canary c(p, true, "");
  EXPECT_TRUE(c.baseline_extra());
  for (int i = 0; i < 3; ++i) c.Record(true, true, 1.0);
  for (int i = 0; i < 30; ++i) c.Record(false, true, 1.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  EXPECT_EQ(c.Evaluate().verdict, CanaryVerdict::kPromote);
  for (int i = 0; i < 5; ++i) c.Record(true, false, 0);
  EXPECT_EQ(c.Evaluate().verdict, CanaryVerdict::kRollBack);
}

TEST(Canary, ReadsThePolicyFromReportJson) {
  const fs::path d = TempDir("policy");
  auto none = ReadCanaryPolicy(d.string(), 3);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->has_value());  // no report.json: no canary

  CanaryPolicy p;
  p.version = 3;
  p.baseline = 2;
  p.percent = 12.5;
  p.window_secs = 30;
  p.min_requests = 7;
  p.max_error_rate_increase = 0.02;
  p.max_p99_ratio = 2;
  p.p99_slack_ms = 0.5;
  ASSERT_TRUE(
      WriteFileAtomic((d / "report.json").string(), "{\"version\": 3, \"canary\": " + CanaryPolicyJson(p) + "}").ok());
  auto read = ReadCanaryPolicy(d.string(), 3);
  ASSERT_TRUE(read.ok() && read->has_value()) << read.status().ToString();
  EXPECT_EQ((*read)->baseline, 2);
  EXPECT_EQ((*read)->percent, 12.5);
  EXPECT_EQ((*read)->window_secs, 30);
  EXPECT_EQ((*read)->min_requests, 7);
  EXPECT_EQ((*read)->max_error_rate_increase, 0.02);
  EXPECT_EQ((*read)->max_p99_ratio, 2);
  EXPECT_EQ((*read)->p99_slack_ms, 0.5);

  ASSERT_TRUE(WriteFileAtomic((d / "report.json").string(), "{\"canary\": null}").ok());
  EXPECT_FALSE(ReadCanaryPolicy(d.string(), 3)->has_value());
}

TEST(Canary, MalformedPoliciesAreNamed) {
  const fs::path d = TempDir("bad");
  struct Case {
    const char* json;
    const char* message;
  };
  for (const Case& c :
       {Case{"{", "not JSON"}, Case{"[1]", "not a JSON object"}, Case{"{\"canary\": 5}", "\"canary\" is not an object"},
        Case{"{\"canary\": {\"baseline_version\": 1}}", "canary.percent is missing"},
        Case{"{\"canary\": {\"percent\": 10}}", "canary.baseline_version is missing"},
        Case{"{\"canary\": {\"percent\": \"10\", \"baseline_version\": 1}}", "canary.percent is not a number"},
        Case{"{\"canary\": {\"percent\": 0, \"baseline_version\": 1}}", "canary.percent = 0 is outside"},
        Case{"{\"canary\": {\"percent\": 100, \"baseline_version\": 1}}", "must be below 100"},
        Case{"{\"canary\": {\"percent\": 5, \"baseline_version\": 3}}", "is not older than version 3"},
        Case{"{\"canary\": {\"percent\": 5, \"baseline_version\": 1.5}}", "is not an integer"},
        Case{"{\"canary\": {\"percent\": 5, \"baseline_version\": 1, \"window\": 3}}",
             "canary.window is not a canary field"},
        Case{"{\"canary\": {\"percent\": 5, \"baseline_version\": 1, \"max_p99_ratio\": 0.5}}",
             "canary.max_p99_ratio = 0.5 is outside"}}) {
    ASSERT_TRUE(WriteFileAtomic((d / "report.json").string(), c.json).ok());
    auto r = ReadCanaryPolicy(d.string(), 3);
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos) << c.json << " -> " << r.status().message();
    EXPECT_NE(r.status().message().find("report.json"), std::string::npos) << r.status().message();
  }
}

TEST(Canary, TheFirstDecisionHolds) {
  const fs::path d = TempDir("decision");
  EXPECT_FALSE(ReadCanaryDecision(d.string())->has_value());
  ASSERT_TRUE(WriteCanaryDecision(d.string(), {false, "error rate \"high\""}).ok());
  const Status second = WriteCanaryDecision(d.string(), {true, "fine"});
  EXPECT_EQ(second.code(), StatusCode::kFailedPrecondition) << second.ToString();
  auto read = ReadCanaryDecision(d.string());
  ASSERT_TRUE(read.ok() && read->has_value()) << read.status().ToString();
  EXPECT_FALSE((*read)->promoted);
  EXPECT_EQ((*read)->reason, "error rate \"high\"");
  // A decision about an earlier release of this version number is not this one's.
  ASSERT_TRUE(WriteFileAtomic((d / "report.json").string(), "{\"version\": 3}").ok());
  EXPECT_FALSE(ReadCanaryDecision(d.string())->has_value());
  fs::remove(d / "report.json");
  EXPECT_TRUE(ReadCanaryDecision(d.string())->has_value());  // its own release again
  // No temporary file is left beside it.
  int files = 0;
  for (const auto& e : fs::directory_iterator(d / ".sampan")) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  ASSERT_TRUE(WriteFileAtomic((d / ".sampan" / "canary-decision.json").string(), "{\"decision\": \"maybe\"}").ok());
  auto bad = ReadCanaryDecision(d.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("decision 'maybe' is neither"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace sampan::server
