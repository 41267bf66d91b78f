// The tracer (server/core/trace.h) on its own: --trace-config parsing, sampling by rate and count,
// settings updates all or nothing with a model's own values, the Triton trace file, OTLP URLs.
#include "server/core/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/core/otlp_export.h"

namespace sampan::server {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct TraceFile {
  std::string path =
      (std::filesystem::temp_directory_path() / ("sampan_trace_" + std::to_string(::getpid()) + "_" +
                                                 ::testing::UnitTest::GetInstance()->current_test_info()->name()))
          .string();
  ~TraceFile() {
    std::error_code ec;
    for (const char* suffix : {"", ".0", ".1", ".2"}) std::filesystem::remove(path + suffix, ec);
  }
};

TraceConfig Config(std::initializer_list<std::string> values) {
  TraceConfig c;
  for (const std::string& v : values) EXPECT_TRUE(ParseTraceConfig(v, &c).ok()) << v;
  return c;
}

// Triton's level may be given more than once: the levels add up, OFF clears them.
TEST(TraceConfigTest, LevelsAddUp) {
  TraceConfig c = Config({"level=TIMESTAMPS", "level=TENSORS"});
  EXPECT_TRUE(c.settings.levels.timestamps && c.settings.levels.tensors);
  c = Config({"level=TENSORS"});
  EXPECT_TRUE(!c.settings.levels.timestamps && c.settings.levels.tensors);
  c = Config({"level=TIMESTAMPS|TENSORS", "level=OFF"});
  EXPECT_FALSE(c.settings.levels.on());
  TraceConfig bad;
  EXPECT_FALSE(ParseTraceConfig("level=OFF|TENSORS", &bad).ok());
}

TEST(TraceConfigTest, ParsesTritonsSyntax) {
  TraceConfig c =
      Config({"level=TIMESTAMPS", "rate=7", "count=-1", "triton,file=/tmp/x.json", "triton,log-frequency=5"});
  EXPECT_TRUE(c.settings.levels.timestamps);
  EXPECT_FALSE(c.settings.levels.tensors);
  EXPECT_EQ(c.settings.rate, 7u);
  EXPECT_EQ(c.settings.count, -1);
  EXPECT_EQ(c.settings.log_frequency, 5u);
  EXPECT_EQ(c.file, "/tmp/x.json");
  c = Config({"mode=opentelemetry", "opentelemetry,url=localhost:4318/v1/traces", "opentelemetry,resource=a=b=c"});
  EXPECT_EQ(c.mode, "opentelemetry");
  ASSERT_EQ(c.resource.size(), 1u);
  EXPECT_EQ(c.resource[0].first, "a");
  EXPECT_EQ(c.resource[0].second, "b=c");
  for (const char* bad : {"rate=0", "rate=-1", "rate=1x", "count=-2", "level=TENSOR", "level=", "mode=x", "x=1",
                          "triton,file=", "opentelemetry,url=ftp://h/p", "opentelemetry,resource=k", "=1", "level"}) {
    TraceConfig t;
    Status st = ParseTraceConfig(bad, &t);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find(bad), std::string::npos) << st.message();
  }
}

TEST(TraceConfigTest, OtlpUrls) {
  auto e = ParseOtlpUrl("http://collector.local:4318/v1/traces");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "collector.local");
  EXPECT_EQ(e->port, "4318");
  EXPECT_EQ(e->path, "/v1/traces");
  e = ParseOtlpUrl("[::1]:9000");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "::1");
  EXPECT_EQ(e->port, "9000");
  EXPECT_EQ(e->path, "/v1/traces");
  e = ParseOtlpUrl("localhost");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->port, "4318");
  for (const char* bad : {"https://h/v1/traces", "http://:4318/x", "http://h:0/x", "http://h:70000/x", "[::1/x", "h:p"})
    EXPECT_FALSE(ParseOtlpUrl(bad).ok()) << bad;
}

TEST(TracerTest, OffSamplesNothing) {
  auto tracer = std::make_shared<Tracer>();
  ASSERT_TRUE(tracer->Configure(TraceConfig{}).ok());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(tracer->Sample("m", "", "http"), nullptr);
}

TEST(TracerTest, RateAndCount) {
  TraceFile f;
  auto tracer = std::make_shared<Tracer>();
  ASSERT_TRUE(tracer->Configure(Config({"level=TIMESTAMPS", "rate=3", "count=2", "triton,file=" + f.path})).ok());
  int taken = 0;
  for (int i = 0; i < 9; ++i) {  // Triton's sampling: the 3rd request, the 6th, ... (count 2: two)
    auto t = tracer->Sample("m", "r", "http");
    if ((i + 1) % 3 == 0 && taken < 2) {
      ASSERT_NE(t, nullptr) << i;
      ++taken;
      t->Record("REQUEST_START", std::chrono::steady_clock::now());
      t->SetVersion("3");
      t->Complete();
      t->Complete();  // once only
    } else {
      EXPECT_EQ(t, nullptr) << i;
    }
  }
  EXPECT_EQ(tracer->completed(), 2u);
  EXPECT_EQ(tracer->Get("")["trace_count"], std::vector<std::string>{"0"});
  // The count ran out with every trace in: written then (as Triton), to an indexed file.
  const std::string json = ReadAll(f.path + ".0");
  EXPECT_NE(json.find(R"({"id":1,"model_name":"m","model_version":3,"request_id":"r","parent_id":0})"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(R"({"id":2,"timestamps":[{"name":"REQUEST_START","ns":)"), std::string::npos) << json;
}

TEST(TracerTest, UpdatesAreAllOrNothingAndModelsKeepTheirOwnValues) {
  TraceFile f;
  auto tracer = std::make_shared<Tracer>();
  ASSERT_TRUE(tracer->Configure(Config({"triton,file=" + f.path})).ok());
  const TraceSettingValues start = tracer->Get("");
  auto bad = tracer->Update(
      "", {{"trace_rate", std::vector<std::string>{"5"}}, {"trace_level", std::vector<std::string>{"NOPE"}}});
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(tracer->Get(""), start);
  auto mine = tracer->Update(
      "m", {{"trace_level", std::vector<std::string>{"TIMESTAMPS"}}, {"trace_rate", std::vector<std::string>{"1"}}});
  ASSERT_TRUE(mine.ok()) << mine.status().message();
  EXPECT_EQ((*mine)["trace_level"], std::vector<std::string>{"TIMESTAMPS"});
  EXPECT_NE(tracer->Sample("m", "", "http"), nullptr);
  EXPECT_EQ(tracer->Sample("other", "", "http"), nullptr);  // the server's level is OFF
  ASSERT_TRUE(tracer->Update("", {{"trace_rate", std::vector<std::string>{"9"}}}).ok());
  EXPECT_EQ(tracer->Get("m")["trace_rate"], std::vector<std::string>{"1"});
  ASSERT_TRUE(tracer->Update("m", {{"trace_rate", std::nullopt}}).ok());
  EXPECT_EQ(tracer->Get("m")["trace_rate"], std::vector<std::string>{"9"});
  ASSERT_TRUE(tracer->Update("m", {{"trace_level", std::nullopt}}).ok());
  EXPECT_EQ(tracer->Sample("m", "", "http"), nullptr);  // nothing of its own left: OFF as the server
  ASSERT_TRUE(tracer->Update("", {{"trace_rate", std::nullopt}}).ok());
  EXPECT_EQ(tracer->Get(""), start);
  for (const char* fixed : {"trace_file", "trace_mode"})
    EXPECT_FALSE(tracer->Update("", {{fixed, std::vector<std::string>{"x"}}}).ok()) << fixed;
  EXPECT_FALSE(tracer->Update("m", {{"log_frequency", std::vector<std::string>{"1"}}}).ok());
  EXPECT_FALSE(tracer->Update("", {{"trace_rate", std::vector<std::string>{"1", "2"}}}).ok());
}

TEST(TracerTest, TimestampsNeedAFile) {
  auto tracer = std::make_shared<Tracer>();
  EXPECT_FALSE(tracer->Configure(Config({"level=TIMESTAMPS"})).ok());
  ASSERT_TRUE(tracer->Configure(TraceConfig{}).ok());
  auto st = tracer->Update("", {{"trace_level", std::vector<std::string>{"TIMESTAMPS"}}});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("needs a trace file"), std::string::npos);
}

TEST(TracerTest, LogFrequencyWritesNumberedFiles) {
  TraceFile f;
  auto tracer = std::make_shared<Tracer>();
  ASSERT_TRUE(
      tracer->Configure(Config({"level=TIMESTAMPS", "rate=1", "triton,log-frequency=2", "triton,file=" + f.path}))
          .ok());
  for (int i = 0; i < 5; ++i) tracer->Sample("m", "", "grpc")->Complete();
  EXPECT_TRUE(std::filesystem::exists(f.path + ".0"));
  EXPECT_TRUE(std::filesystem::exists(f.path + ".1"));
  EXPECT_FALSE(std::filesystem::exists(f.path + ".2"));
  tracer->Flush();  // the fifth
  EXPECT_NE(ReadAll(f.path + ".2").find(R"("id":5)"), std::string::npos);
}

}  // namespace
}  // namespace sampan::server
