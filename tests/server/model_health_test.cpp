// Model health (server/core/model_health.h): the --model-health-rule syntax and errors, which
// outcomes count against a model, and the error-rate window on a clock the test drives: trips at
// the rate with enough requests, names the model and the figures, clears as failures leave the
// window, logs nothing new while the state holds, and the metrics follow.
#include "server/core/model_health.h"

#include <gtest/gtest.h>

namespace sampan::server {
namespace {

using Clock = ModelErrorRates::Clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(ModelHealthRules, DefaultsAndEachSetting) {
  auto r = ParseModelHealthRules({});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value().on());  // off unless asked for
  EXPECT_EQ(r.value().window, seconds(10));
  EXPECT_EQ(r.value().min_requests, 20u);
  r = ParseModelHealthRules({"error-rate=50%", "window-s=30", "min-requests=5"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r.value().error_rate, 0.5);
  EXPECT_EQ(r.value().window, seconds(30));
  EXPECT_EQ(r.value().min_requests, 5u);
  r = ParseModelHealthRules({"error-rate=2.5"});
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r.value().error_rate, 0.025);
  r = ParseModelHealthRules({"error-rate=50", "off"});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value().on());
  r = ParseModelHealthRules({"error-rate=0"});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value().on());
}

TEST(ModelHealthRules, ErrorsNameTheValue) {
  for (auto [spec, want] : {std::pair{"flaky", "--model-health-rule 'flaky': expected NAME=VALUE"},
                            {"latency=3", "--model-health-rule 'latency=3': unknown rule 'latency'"},
                            {"error-rate=120", "'error-rate=120': '120' is not a percentage from 0 (off) to 100"},
                            {"error-rate=-1", "'-1' is not a percentage"},
                            {"error-rate=half", "'half' is not a percentage"},
                            {"window-s=0", "'window-s=0': '0' is not a whole number >= 1"},
                            {"min-requests=x", "'x' is not a whole number >= 1"}}) {
    auto r = ParseModelHealthRules({spec});
    ASSERT_FALSE(r.ok()) << spec;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  }
}

TEST(ModelHealthRules, OnlyServerSideFailuresCount) {
  EXPECT_TRUE(CountsAgainstModel(StatusCode::kInternal));
  EXPECT_TRUE(CountsAgainstModel(StatusCode::kIoError));
  EXPECT_TRUE(CountsAgainstModel(StatusCode::kFailedPrecondition));
  // Shed (queue full), not ready, the client's bad input, a cancel: not the model's fault.
  for (StatusCode c :
       {StatusCode::kUnavailable, StatusCode::kInvalidArgument, StatusCode::kNotFound, StatusCode::kOutOfRange,
        StatusCode::kCancelled, StatusCode::kUnsupported, StatusCode::kDeadlineExceeded})
    EXPECT_FALSE(CountsAgainstModel(c)) << StatusCodeName(c);
}

ModelHealthRules Rules(double rate, int window_s, uint64_t min_requests) {
  ModelHealthRules r;
  r.error_rate = rate;
  r.window = seconds(window_s);
  r.min_requests = min_requests;
  return r;
}

TEST(ModelErrorRates, TripsAtTheRateWithEnoughRequestsAndNamesTheModel) {
  metrics::Registry registry;
  ModelErrorRates rates(Rules(0.5, 10, 10), &registry);
  const Clock::time_point t0{seconds(1000)};
  // 9 requests, all failed: below min-requests, no trip.
  for (int i = 0; i < 9; ++i) rates.Record("m", true, t0 + milliseconds(10 * i));
  EXPECT_EQ(rates.Unhealthy(t0 + milliseconds(100)), "");
  // The 10th, succeeded: 9 of 10 failed, 90% >= 50%.
  rates.Record("m", false, t0 + milliseconds(100));
  EXPECT_EQ(rates.Unhealthy(t0 + milliseconds(100)),
            "model 'm': 9 of 10 requests failed in the last 10 s (90%; rule: error-rate=50%)");
  // Another model, healthy, is not named.
  for (int i = 0; i < 50; ++i) rates.Record("q", false, t0 + milliseconds(i));
  EXPECT_EQ(rates.Window("q", t0 + milliseconds(100)), (std::pair<uint64_t, uint64_t>{0, 50}));
  EXPECT_EQ(rates.Unhealthy(t0 + milliseconds(200)).find("'q'"), std::string::npos);
  const std::string text = registry.Render();
  EXPECT_NE(text.find("sampan_model_error_rate{model=\"m\"} 0.9"), std::string::npos) << text;
  EXPECT_NE(text.find("sampan_model_error_rate{model=\"q\"} 0"), std::string::npos) << text;
  EXPECT_NE(text.find("sampan_model_health_rule_tripped{model=\"m\",rule=\"error-rate\"} 1"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("sampan_model_health_rule_tripped{model=\"q\""), std::string::npos) << text;
}

TEST(ModelErrorRates, BelowTheRateStaysHealthy) {
  ModelErrorRates rates(Rules(0.5, 10, 10), nullptr);
  const Clock::time_point t0{seconds(50)};
  for (int i = 0; i < 100; ++i) rates.Record("m", i % 3 == 0, t0 + milliseconds(i));  // 34% failed
  EXPECT_EQ(rates.Unhealthy(t0 + seconds(1)), "");
  EXPECT_EQ(rates.Window("m", t0 + seconds(1)), (std::pair<uint64_t, uint64_t>{34, 100}));
}

TEST(ModelErrorRates, FailuresLeaveTheWindowAndTheRuleClears) {
  metrics::Registry registry;
  ModelErrorRates rates(Rules(0.2, 10, 5), &registry);
  const Clock::time_point t0{seconds(7)};
  for (int i = 0; i < 10; ++i) rates.Record("m", true, t0);
  ASSERT_NE(rates.Unhealthy(t0), "");
  // Successes dilute the rate: 10 of 60 failed (17%) < 20%.
  for (int i = 0; i < 50; ++i) rates.Record("m", false, t0 + seconds(5));
  EXPECT_EQ(rates.Unhealthy(t0 + seconds(5)), "");
  EXPECT_EQ(registry.Render().find("sampan_model_health_rule_tripped{"), std::string::npos);
  // New failures trip it again; with no more traffic, it clears once they are a window old
  // (a slot is a tenth of the window: counts leave it within 1 s of 10 s).
  for (int i = 0; i < 20; ++i) rates.Record("m", true, t0 + seconds(6));
  EXPECT_NE(rates.Unhealthy(t0 + seconds(6)), "");
  // The first failures left: 20 of 70 remain; then only the last 20.
  EXPECT_EQ(rates.Window("m", t0 + seconds(14) + milliseconds(500)), (std::pair<uint64_t, uint64_t>{20, 70}));
  EXPECT_NE(rates.Unhealthy(t0 + seconds(14) + milliseconds(500)), "");
  EXPECT_EQ(rates.Window("m", t0 + seconds(15) + milliseconds(500)), (std::pair<uint64_t, uint64_t>{20, 20}));
  EXPECT_EQ(rates.Window("m", t0 + seconds(16) + milliseconds(500)), (std::pair<uint64_t, uint64_t>{0, 0}));
  EXPECT_EQ(rates.Unhealthy(t0 + seconds(17)), "");
  EXPECT_NE(registry.Render().find("sampan_model_error_rate{model=\"m\"} 0"), std::string::npos);
}

TEST(ModelErrorRates, OffNeverTrips) {
  ModelErrorRates rates(ModelHealthRules{}, nullptr);
  const Clock::time_point t0{seconds(1)};
  for (int i = 0; i < 100; ++i) rates.Record("m", true, t0);
  EXPECT_EQ(rates.Unhealthy(t0), "");
}

}  // namespace
}  // namespace sampan::server
