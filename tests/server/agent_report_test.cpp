// The agent check's per-model replies (server/agent/agent_report.h): the agent-send line's
// grammar and its errors, the service rate over a sliding window, the weight a rate gives and
// the line for each state. CoreTest.AgentReporter* (core_test.cpp) read a real Core.
#include "server/agent/agent_report.h"

#include <gtest/gtest.h>

#include <limits>

namespace sampan::server {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(AgentQuery, ModelAndUnit) {
  auto q = ParseAgentQuery("model=resnet unit=25\n");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q.value().model, "resnet");
  EXPECT_EQ(q.value().unit, 25);
  q = ParseAgentQuery("  model=m  ");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q.value().model, "m");
  EXPECT_EQ(q.value().unit, 1);
  q = ParseAgentQuery("unit=0.5 model=m\r\n");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q.value().unit, 0.5);
  q = ParseAgentQuery("");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q.value().model, "");
}

TEST(AgentQuery, ErrorsNameTheWord) {
  for (auto [line, want] : {std::pair{"ping", "agent-send word 'ping': expected model=NAME"},
                            {"model=", "word 'model=': expected model=NAME"},
                            {"model=m weight=3", "word 'weight=3'"},
                            {"model=m unit=0", "word 'unit=0': unit must be a positive number"},
                            {"model=m unit=-2", "word 'unit=-2'"},
                            {"model=m unit=2x", "word 'unit=2x'"},
                            {"model=m unit=nan", "word 'unit=nan'"},
                            {"model=m unit=", "word 'unit='"},
                            {"unit=3", "agent-send 'unit=3': unit= without model=NAME"}}) {
    auto q = ParseAgentQuery(line);
    ASSERT_FALSE(q.ok()) << line;
    EXPECT_EQ(q.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(q.status().message().find(want), std::string::npos) << line << ": " << q.status().message();
  }
}

TEST(ServiceRate, RowsPerBusySecondOverTheWindow) {
  ServiceRate r(1000ms);
  const Clock::time_point t0{};
  EXPECT_FALSE(r.Update(t0, 0, 0).has_value());  // nothing ran yet
  // 100 rows computed in 0.5 s of busy time: 200 rows/s, whatever the wall time between.
  EXPECT_DOUBLE_EQ(*r.Update(t0 + 200ms, 100, 500'000'000), 200.0);
  EXPECT_DOUBLE_EQ(*r.Update(t0 + 900ms, 300, 1'500'000'000), 200.0);
  // Past the window the first samples drop out: from t0+900ms on, 30 rows in 1 s: 30 rows/s.
  EXPECT_DOUBLE_EQ(*r.Update(t0 + 1900ms, 330, 2'500'000'000), 30.0);
  // Idle (nothing new in the window): the last rate measured stays.
  EXPECT_DOUBLE_EQ(*r.Update(t0 + 3000ms, 330, 2'500'000'000), 30.0);
  EXPECT_DOUBLE_EQ(*r.Update(t0 + 9000ms, 330, 2'500'000'000), 30.0);
  // Counters that go back (the model was reloaded) start afresh, keeping the last rate until
  // something is measured again.
  EXPECT_DOUBLE_EQ(*r.Update(t0 + 9100ms, 0, 0), 30.0);
  EXPECT_DOUBLE_EQ(*r.Update(t0 + 9200ms, 10, 100'000'000), 100.0);
  // Back again, to counters already past 0: their own estimate, 5 rows in 0.1 s.
  EXPECT_DOUBLE_EQ(*r.Update(t0 + 9300ms, 5, 100'000'000), 50.0);
  EXPECT_DOUBLE_EQ(*r.Update(t0 + 9400ms, 5, 100'000'000), 50.0);
}

TEST(ServiceRate, TheFirstSampleUsesTheCountersSinceLoad) {
  ServiceRate r(1000ms);
  const Clock::time_point t0{};
  // An agent that starts asking after the model ran: 40 rows in 0.2 s of busy time.
  EXPECT_DOUBLE_EQ(*r.Update(t0, 40, 200'000'000), 200.0);
  EXPECT_DOUBLE_EQ(*r.Update(t0 + 100ms, 40, 200'000'000), 200.0);
  EXPECT_DOUBLE_EQ(*r.Update(t0 + 200ms, 50, 300'000'000), 100.0);
}

TEST(ServiceRate, ChecksCloseTogetherShareASample) {
  ServiceRate r(1000ms);
  const Clock::time_point t0{};
  r.Update(t0, 0, 0);
  for (int i = 1; i <= 1000; ++i) r.Update(t0 + std::chrono::microseconds(i), i, i * 1000'000ULL);
  // 1000 updates within 1 ms: one sample beside the first; the rate is still right.
  EXPECT_DOUBLE_EQ(*r.Update(t0 + 2ms, 1000, 1000'000'000ULL), 1000.0);
}

TEST(AgentWeightOfARate, RoundedOverTheUnitWithinHaproxysRange) {
  EXPECT_EQ(RateWeight(200, 1), 200);
  EXPECT_EQ(RateWeight(66.6, 1), 67);
  EXPECT_EQ(RateWeight(5000, 25), 200);
  EXPECT_EQ(RateWeight(5000, 1), 256);  // haproxy's largest weight
  EXPECT_EQ(RateWeight(0.2, 1), 1);     // never 0: that is drain's
  EXPECT_EQ(RateWeight(0, 1), 1);
  EXPECT_EQ(RateWeight(std::nan(""), 1), 1);
  EXPECT_EQ(RateWeight(std::numeric_limits<double>::infinity(), 1), 256);
}

TEST(AgentModelReply, Lines) {
  AgentState node;
  ModelSnapshot s;
  EXPECT_EQ(ModelReply(node, "m", s, std::nullopt, 1), "down #model m is not in the repository\n");
  s.found = true;
  EXPECT_EQ(ModelReply(node, "m", s, 100.0, 1), "down #model m not ready\n");
  s.ready = true;
  EXPECT_EQ(ModelReply(node, "m", s, std::nullopt, 1), "up ready\n");  // haproxy keeps its weight
  EXPECT_EQ(ModelReply(node, "m", s, 33.4, 1), "up ready 33%\n");
  s.instances = 4;  // four instances computing side by side
  EXPECT_EQ(ModelReply(node, "m", s, 33.4, 1), "up ready 134%\n");
  EXPECT_EQ(ModelReply(node, "m", s, 33.4, 2), "up ready 67%\n");
  node.ready = false;  // the node as a whole decides first
  EXPECT_EQ(ModelReply(node, "m", s, 33.4, 1), "down #not ready\n");
  node.shutting_down = true;
  EXPECT_EQ(ModelReply(node, "m", s, 33.4, 1), "drain\n");
}

}  // namespace
}  // namespace sampan::server
