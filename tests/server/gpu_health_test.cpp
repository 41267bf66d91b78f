// GPU health (server/core/gpu_health.h): the rules' flag syntax and errors, what each rule makes
// of a sample, and the whole path through a fake NVML library (tests/fixtures/fake_nvml) whose
// figures a state file sets: NVML read by dlopen, XID events delivered once, readiness false with
// the reason while a rule trips (sticky or not), and the DCGM-named metrics.
#include "server/core/gpu_health.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "server/agent/agent_check.h"
#include "server/core/core.h"

namespace sampan::server {
namespace {

namespace fs = std::filesystem;
using metrics::GpuHealthSample;

TEST(GpuHealthRules, DefaultsAndEachRule) {
  auto r = ParseGpuHealthRules({});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value().xids.count(79) && r.value().xids.count(48) && !r.value().xids.count(13));
  EXPECT_EQ(r.value().ecc_dbe, 1u);
  EXPECT_EQ(r.value().temperature_c, 0u);
  r = ParseGpuHealthRules({"xid=79,13", "ecc-dbe=3", "ecc-sbe=100", "retired-pages=60", "retired-pending=off",
                           "remap-failure=off", "remap-pending=on", "temperature=90", "throttle=hw_slowdown,hw_thermal",
                           "memory-growth-mib=512"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const GpuHealthRules& g = r.value();
  EXPECT_EQ(g.xids, (std::set<uint64_t>{13, 79}));
  EXPECT_EQ(g.ecc_dbe, 3u);
  EXPECT_EQ(g.ecc_sbe, 100u);
  EXPECT_EQ(g.retired_pages, 60u);
  EXPECT_FALSE(g.retired_pending);
  EXPECT_FALSE(g.remap_failure);
  EXPECT_TRUE(g.remap_pending);
  EXPECT_EQ(g.temperature_c, 90u);
  EXPECT_EQ(g.throttle_mask, 0x8u | 0x40u);
  EXPECT_EQ(g.memory_growth_mib, 512u);
  r = ParseGpuHealthRules({"off"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value().xids.empty() && r.value().ecc_dbe == 0 && !r.value().retired_pending &&
              !r.value().remap_failure);
  r = ParseGpuHealthRules({"off", "default", "xid=none"});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value().xids.empty() && r.value().ecc_dbe == 1);
}

TEST(GpuHealthRules, ErrorsNameTheValue) {
  for (auto [spec, want] : {std::pair{"hot", "--gpu-health-rule 'hot': expected NAME=VALUE"},
                            {"fan=3", "--gpu-health-rule 'fan=3': unknown rule 'fan'"},
                            {"temperature=hot", "'temperature=hot': 'hot' is not a whole number"},
                            {"ecc-dbe=-1", "'ecc-dbe=-1': '-1' is not a whole number"},
                            {"xid=79,,48", "'xid=79,,48': '' is not a whole number"},
                            {"retired-pending=yes", "expected on or off, not 'yes'"},
                            {"throttle=idle", "unknown throttle reason 'idle'"}}) {
    auto r = ParseGpuHealthRules({spec});
    ASSERT_FALSE(r.ok()) << spec;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  }
}

TEST(GpuHealthEvaluate, EachRuleTripsOnItsFigure) {
  GpuHealthRules rules = ParseGpuHealthRules({"ecc-sbe=10", "retired-pages=2", "remap-pending=on", "temperature=90",
                                              "throttle=hw_thermal", "memory-growth-mib=100"})
                             .value();
  GpuHealthSample start;
  start.ecc_dbe_volatile = 2;
  start.ecc_sbe_volatile = 5;
  start.memory_used = 1000ull << 20;
  GpuHealthSample now = start;
  auto rules_of = [&](uint64_t accounted) {
    std::vector<std::string> out;
    for (const GpuFault& f : EvaluateGpuHealth(rules, start, now, accounted, 600ll << 20)) out.push_back(f.rule);
    return out;
  };
  EXPECT_TRUE(rules_of(400ull << 20).empty());
  now.xids = {13, 79};  // 13 is not a rule's; 79 is
  now.ecc_dbe_volatile = 3;
  now.ecc_sbe_volatile = 14;  // 9 since start: under 10
  now.retired_sbe = 1, now.retired_dbe = 1;
  now.retired_pending = true;
  now.remap_failure = true;
  now.remap_pending = true;
  now.temperature_c = 90;
  now.throttle_reasons = 0x40 | 0x1;
  now.memory_used = 1200ull << 20;  // accounted 400 MiB: 800 beyond, 200 more than at start
  EXPECT_EQ(rules_of(400ull << 20),
            (std::vector<std::string>{"xid", "ecc-dbe", "retired-pages", "retired-pending", "remap-failure",
                                      "remap-pending", "temperature", "throttle", "memory-growth"}));
  // The plans account for the growth (a model loaded): no memory fault.
  EXPECT_EQ(rules_of(600ull << 20).back(), "throttle");
  const auto faults = EvaluateGpuHealth(rules, start, now, 400ull << 20, 600ll << 20);
  EXPECT_EQ(faults[0].detail, "XID 79 (GPU has fallen off the bus)");
  EXPECT_TRUE(faults[0].sticky);
  EXPECT_EQ(faults[1].detail, "1 uncorrected ECC error(s) since start (rule: 1)");
  EXPECT_EQ(faults[6].detail, "temperature 90 C (rule: 90)");
  EXPECT_FALSE(faults[6].sticky);
  EXPECT_EQ(faults[7].detail, "clocks throttled: hw_thermal");
  EXPECT_EQ(faults[8].detail, "device memory beyond the plans' grew by 200 MiB since start (rule: 100)");
  EXPECT_EQ(XidText(13), "XID 13 (graphics engine exception)");
  EXPECT_EQ(XidText(999), "XID 999");
}

// A state file for the fake NVML, and the environment that points the server at both.
class FakeNvml : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           StrCat("sampan_fake_nvml_", getpid(), "_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    state_ = dir_ / "state";
    setenv("SAMPAN_FAKE_NVML_STATE", state_.c_str(), 1);
    Write(
        "gpus 2\ngpu0.memory_used 1073741824\ngpu0.memory_total 85899345920\ngpu0.temperature 60\n"
        "gpu0.ecc_dbe_volatile 0\ngpu0.ecc_sbe_volatile 4\ngpu0.throttle 0x1\ngpu1.uuid GPU-second\n");
  }
  void TearDown() override {
    unsetenv("SAMPAN_FAKE_NVML_STATE");
    fs::remove_all(dir_);
  }
  void Write(const std::string& text) {
    std::ofstream(state_.string() + ".tmp") << text;
    fs::rename(state_.string() + ".tmp", state_);  // whole, as a reader may look at any time
  }
  fs::path dir_, state_;
};

TEST_F(FakeNvml, TheMonitorReadsEveryFigureAndEachXidOnce) {
  auto m = metrics::GpuMonitor::OpenOrError(SAMPAN_FAKE_NVML_PATH);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto s = m.value()->SampleHealth();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].uuid, "GPU-fake-0");
  EXPECT_EQ(s[1].uuid, "GPU-second");
  EXPECT_EQ(s[0].temperature_c, 60u);
  EXPECT_EQ(s[0].ecc_sbe_volatile, 4u);
  EXPECT_EQ(s[0].throttle_reasons, 1u);
  EXPECT_EQ(s[0].memory_used, 1ull << 30);
  EXPECT_FALSE(s[0].remap_failure.has_value());  // not in the file: not supported
  EXPECT_FALSE(s[1].temperature_c.has_value());
  EXPECT_TRUE(s[0].xids.empty());
  Write("gpus 2\ngpu1.xids 79\ngpu1.retired_dbe 3\n");
  s = m.value()->SampleHealth();
  EXPECT_EQ(s[1].xids, (std::vector<uint64_t>{79}));
  EXPECT_EQ(s[1].retired_dbe, 3u);
  Write("gpus 2\ngpu1.xids 79,48\n");
  s = m.value()->SampleHealth();
  EXPECT_EQ(s[1].xids, (std::vector<uint64_t>{48}));  // 79 was delivered already
  EXPECT_TRUE(m.value()->SampleHealth()[1].xids.empty());
}

TEST_F(FakeNvml, LibrariesThatCannotServeAreNamed) {
  auto m = metrics::GpuMonitor::OpenOrError((dir_ / "missing.so").string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("NVML library '" + (dir_ / "missing.so").string() + "' cannot be loaded"),
            std::string::npos)
      << m.status().message();
  fs::remove(state_);  // the fake's "no driver"
  m = metrics::GpuMonitor::OpenOrError(SAMPAN_FAKE_NVML_PATH);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("nvmlInit_v2 failed (NVML error 9)"), std::string::npos) << m.status().message();
  Write("gpus 0\n");
  m = metrics::GpuMonitor::OpenOrError(SAMPAN_FAKE_NVML_PATH);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("sees no GPU"), std::string::npos) << m.status().message();
  // Asked for by name, a library that cannot serve stops GpuHealth::Start with the reason.
  GpuHealthOptions o;
  o.library = (dir_ / "missing.so").string();
  auto h = GpuHealth::Start(o, nullptr);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("GPU health: NVML library"), std::string::npos) << h.status().message();
}

TEST_F(FakeNvml, RulesTripStickyOrNotAndTheMetricsHaveDcgmNames) {
  metrics::Registry registry;
  GpuHealthOptions o;
  o.rules = ParseGpuHealthRules({"temperature=85"}).value();
  o.interval = std::chrono::milliseconds(0);  // polled by the test
  o.library = SAMPAN_FAKE_NVML_PATH;
  auto started = GpuHealth::Start(o, &registry);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  GpuHealth& h = *started.value();
  EXPECT_EQ(h.Unhealthy(), "");
  std::string text = registry.Render();
  for (const char* line :
       {"DCGM_FI_DEV_GPU_TEMP{gpu=\"0\",UUID=\"GPU-fake-0\"} 60\n",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{gpu=\"0\",UUID=\"GPU-fake-0\"} 4\n",
        "DCGM_FI_DEV_XID_ERRORS{gpu=\"0\",UUID=\"GPU-fake-0\"} 0\n",
        "DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-fake-0\"} 1024\n",
        "DCGM_FI_DEV_FB_FREE{gpu=\"0\",UUID=\"GPU-fake-0\"} 80896\n",
        "sampan_gpu_healthy{gpu=\"1\",UUID=\"GPU-second\"} 1\n", "# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL counter\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " not in\n" << text;
  // Hot: not ready while it lasts.
  Write("gpus 2\ngpu1.uuid GPU-second\ngpu0.temperature 91\ngpu0.ecc_dbe_volatile 0\n");
  h.Poll();
  EXPECT_EQ(h.Unhealthy(), "GPU 0 (GPU-fake-0): temperature 91 C (rule: 85)");
  EXPECT_NE(
      registry.Render().find("sampan_gpu_health_rule_tripped{gpu=\"0\",UUID=\"GPU-fake-0\",rule=\"temperature\"} 1"),
      std::string::npos);
  Write("gpus 2\ngpu1.uuid GPU-second\ngpu0.temperature 70\ngpu0.ecc_dbe_volatile 0\n");
  h.Poll();
  EXPECT_EQ(h.Unhealthy(), "");
  EXPECT_EQ(registry.Render().find("sampan_gpu_health_rule_tripped{"), std::string::npos);
  // XID 79 on GPU 1, then uncorrected ECC errors on GPU 0: both stay, the XID after its event.
  Write("gpus 2\ngpu1.uuid GPU-second\ngpu1.xids 79\ngpu0.ecc_dbe_volatile 0\n");
  h.Poll();
  EXPECT_EQ(h.Unhealthy(), "GPU 1 (GPU-second): XID 79 (GPU has fallen off the bus)");
  Write("gpus 2\ngpu1.uuid GPU-second\ngpu1.xids 79\ngpu0.ecc_dbe_volatile 2\n");
  h.Poll();
  h.Poll();
  EXPECT_EQ(h.Unhealthy(),
            "GPU 0 (GPU-fake-0): 2 uncorrected ECC error(s) since start (rule: 1); "
            "GPU 1 (GPU-second): XID 79 (GPU has fallen off the bus)");
  text = registry.Render();
  for (const char* line : {"DCGM_FI_DEV_XID_ERRORS{gpu=\"1\",UUID=\"GPU-second\"} 79\n",
                           "sampan_gpu_xid_errors_total{gpu=\"1\",UUID=\"GPU-second\",xid=\"79\"} 1\n",
                           "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu=\"0\",UUID=\"GPU-fake-0\"} 2\n",
                           "sampan_gpu_healthy{gpu=\"1\",UUID=\"GPU-second\"} 0\n",
                           "sampan_gpu_health_rule_tripped{gpu=\"0\",UUID=\"GPU-fake-0\",rule=\"ecc-dbe\"} 1\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " not in\n" << text;
}

TEST_F(FakeNvml, TheCoreIsNotReadyWithTheReasonAndTheAgentSaysSo) {
  fs::create_directories(dir_ / "repo");
  CoreOptions o;
  o.repository = (dir_ / "repo").string();
  o.nvml_library = SAMPAN_FAKE_NVML_PATH;
  o.gpu_health_interval_ms = 20;
  o.gpu_health_rules = {"xid=79"};
  auto core = Core::Start(o);
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  EXPECT_TRUE(core.value()->Ready());
  EXPECT_EQ(AgentReply(AgentStateOf(*core.value())), "up ready 100%\n");
  Write("gpus 2\ngpu0.xids 79\n");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (core.value()->Ready() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(core.value()->Ready());
  EXPECT_EQ(core.value()->NotReadyReason(), "GPU 0 (GPU-fake-0): XID 79 (GPU has fallen off the bus)");
  EXPECT_EQ(AgentReply(AgentStateOf(*core.value())),
            "down #not ready: GPU 0 (GPU-fake-0): XID 79 (GPU has fallen off the bus)\n");
  EXPECT_NE(core.value()->RenderMetrics().find("DCGM_FI_DEV_XID_ERRORS{gpu=\"0\",UUID=\"GPU-fake-0\"} 79"),
            std::string::npos);
  // A bad rule or library stops the start, by name.
  o.gpu_health_rules = {"xid=lots"};
  auto bad = Core::Start(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--gpu-health-rule 'xid=lots'"), std::string::npos);
  o.gpu_health_rules = {};
  o.nvml_library = (dir_ / "nope.so").string();
  bad = Core::Start(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("nope.so' cannot be loaded"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace sampan::server
