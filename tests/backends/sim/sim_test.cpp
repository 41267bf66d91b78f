// The sim backend (backends/sim/sim.h): its latency table, the simulated machine's memory and
// run queue, and plans built with --backend sim that run by waiting.
#include "backends/sim/sim.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "builder/builder.h"
#include "passes/pass_test_util.h"
#include "plan/plan.h"
#include "runtime/backend.h"
#include "runtime/engine.h"

namespace sampan::sim {
namespace {

using passes::testing::MustParse;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

class SimFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("sampan_sim_" + std::to_string(::getpid()) + "_" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // A `sampan bench --json` file as bench writes it (the fields the sim reads, and others).
  std::string Bench(const std::string& name, int64_t batch, double median_ms, double qps,
                    const std::string& backend = "cuda") {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << "{\n  \"plan\": \"m.plan\",\n  \"backend\": \"" << backend
                        << "\",\n  \"runs_on\": \"NVIDIA H200, sm_90\",\n  \"streams\": 1,\n  \"in_flight\": 2,\n"
                        << "  \"batch\": " << batch << ",\n  \"throughput_qps\": " << qps
                        << ",\n  \"latency_ms\": {\"min\": 1, \"max\": 9, \"mean\": " << median_ms
                        << ", \"median\": " << median_ms
                        << ", \"p90\": 5, \"p95\": 5, \"p99\": 5, \"stddev\": 0.1}\n}\n";
    return path;
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::filesystem::path dir_;
};

TEST(SimLatencyTable, InterpolatesBetweenBatchesAndScalesBeyond) {
  LatencyTable t;
  t.points = {{1, 2.0, 1.0}, {8, 9.0, 4.5}, {32, 30.0, 20.0}};
  EXPECT_EQ(t.At(1).latency_ms, 2.0);
  EXPECT_EQ(t.At(0).latency_ms, 2.0) << "below the smallest: the smallest's figures";
  EXPECT_DOUBLE_EQ(t.At(4).latency_ms, 2.0 + 3.0 / 7.0 * 7.0);
  EXPECT_DOUBLE_EQ(t.At(4).occupancy_ms, 1.0 + 3.0 / 7.0 * 3.5);
  EXPECT_EQ(t.At(8), (LatencyPoint{8, 9.0, 4.5}));
  EXPECT_DOUBLE_EQ(t.At(20).latency_ms, 9.0 + 0.5 * 21.0);
  EXPECT_DOUBLE_EQ(t.At(64).latency_ms, 60.0) << "above the largest: in proportion to the batch";
  EXPECT_DOUBLE_EQ(t.At(64).occupancy_ms, 40.0);
}

TEST(SimLatencyTable, SerializesAndParsesBack) {
  LatencyTable t;
  t.points = {{1, 1.25, 0.5}, {16, 7.125, 6.0}};
  t.source = "b1.json, b16.json (measured on NVIDIA H200)";
  auto back = LatencyTable::Parse(t.Serialize());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->points, t.points);
  EXPECT_EQ(back->source, t.source);
  for (const char* bad :
       {"", "source x\n", "1 2\n", "1 2 3\n", "0 2 1\n", "4 2 1\n2 2 1\n", "1 2 1 extra\n", "1 -2 1\n"}) {
    auto r = LatencyTable::Parse(bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "'";
    if (!r.ok()) {
      EXPECT_THAT(r.status().message(), HasSubstr("sim latency table")) << bad;
    }
  }
}

TEST_F(SimFiles, ReadsBenchJsonOnePerBatchSize) {
  // Pipelined: 4 ms a run, 500 runs/s -> the device is busy 2 ms a run.
  auto t = LatencyTable::FromBenchFiles({Bench("b8.json", 8, 4.0, 500), Bench("b1.json", 1, 1.5, 1000)});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->points.size(), 2u);
  EXPECT_EQ(t->points[0], (LatencyPoint{1, 1.5, 1.0}));
  EXPECT_EQ(t->points[1], (LatencyPoint{8, 4.0, 2.0}));
  EXPECT_THAT(t->source, HasSubstr("b1.json"));
  EXPECT_THAT(t->source, HasSubstr("NVIDIA H200"));
  // A run never holds the device longer than it lasts (several streams: qps below 1/latency).
  auto slow = LatencyTable::FromBenchFiles({Bench("s.json", 4, 10.0, 50)});
  ASSERT_TRUE(slow.ok());
  EXPECT_EQ(slow->points[0].occupancy_ms, 10.0);
}

TEST_F(SimFiles, RefusesBadProfilesNamingFileAndField) {
  struct Case {
    std::vector<std::string> files;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{}, "--sim-profile FILE"},
      {{(dir_ / "missing.json").string()}, "missing.json"},
      {{Write("text.json", "not json")}, "not JSON"},
      {{Write("arr.json", "[1]")}, "not a `sampan bench --json` object"},
      {{Write("nob.json", R"({"latency_ms": {"median": 1}, "throughput_qps": 5})")}, "'batch'"},
      {{Write("nol.json", R"({"batch": 2, "throughput_qps": 5})")}, "'latency_ms'"},
      {{Write("zero.json", R"({"batch": 2, "latency_ms": {"median": 0}, "throughput_qps": 5})")},
       "'median' must be > 0"},
      {{Write("noq.json", R"({"batch": 2, "latency_ms": {"median": 1}})")}, "'throughput_qps'"},
      {{Bench("a.json", 4, 2, 100), Bench("b.json", 4, 3, 100)}, "batch 4 is given twice"},
      {{Bench("sim.json", 4, 2, 100, "sim")}, "measured on a sim plan"},
  };
  for (const Case& c : cases) {
    auto r = LatencyTable::FromBenchFiles(c.files);
    ASSERT_FALSE(r.ok()) << c.want;
    EXPECT_THAT(r.status().message(), HasSubstr(c.want));
  }
}

TEST(SimMachine, MemoryIsReservedPerDeviceAndRefusedWhenFull) {
  SimMachine m(2, 1000);
  EXPECT_TRUE(m.Reserve(0, 600, "a").ok());
  Status full = m.Reserve(0, 500, "the plan's weights");
  EXPECT_EQ(full.code(), StatusCode::kUnavailable);
  EXPECT_THAT(full.message(), HasSubstr("sim device 0 is out of memory"));
  EXPECT_TRUE(m.Reserve(1, 500, "b").ok()) << "device 1 has its own memory";
  EXPECT_EQ(m.used(0), 600u);
  m.Release(0, 600);
  EXPECT_TRUE(m.Reserve(0, 1000, "c").ok());
  EXPECT_THAT(m.Reserve(2, 1, "d").message(), HasSubstr("sim device 2 does not exist"));
}

TEST(SimMachine, OneDeviceRunsOneBatchAtATimeInArrivalOrder) {
  SimMachine m(2, 1 << 20);
  const auto t0 = Clock::now();
  const auto a = m.Book(0, 10.0, 4.0);  // starts now, frees the device at +4, ends at +10
  const auto b = m.Book(0, 10.0, 4.0);  // starts at +4, ends at +14
  const auto c = m.Book(1, 10.0, 4.0);  // another device: starts now
  auto ms = [&](Clock::time_point t) { return std::chrono::duration<double, std::milli>(t - t0).count(); };
  EXPECT_NEAR(ms(a), 10.0, 1.0);
  EXPECT_NEAR(ms(b), 14.0, 1.0);
  EXPECT_NEAR(ms(c), 10.0, 1.0);
}

TEST(SimMachine, FaultFileBreaksTheNamedDevicesAtTheirNextRunForGood) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("sampan_sim_fault_" + std::to_string(getpid()));
  std::filesystem::remove(file);
  SimMachine m(3, 1 << 20, file.string());
  EXPECT_TRUE(m.CheckFault(0).ok()) << "no file: no fault";
  std::ofstream(file) << "1\n";  // device 1 only
  EXPECT_TRUE(m.DeviceHealth(1).ok()) << "a device breaks at a run, not before";
  Status hit = m.CheckFault(1);
  EXPECT_EQ(hit.code(), StatusCode::kInternal);
  EXPECT_THAT(hit.message(), HasSubstr("sim device 1: simulated sticky device error"));
  EXPECT_THAT(hit.message(), HasSubstr("fault injected: " + file.string()));
  EXPECT_TRUE(m.CheckFault(0).ok() && m.CheckFault(2).ok()) << "devices not listed keep running";
  std::filesystem::remove(file);
  EXPECT_FALSE(m.CheckFault(1).ok()) << "sticky: the file gone, the device stays broken";
  EXPECT_FALSE(m.DeviceHealth(1).ok());
  std::ofstream(file) << "";  // empty: every device
  EXPECT_FALSE(m.CheckFault(0).ok());
  EXPECT_FALSE(m.CheckFault(2).ok());
  std::filesystem::remove(file);
  SimMachine flaky(2, 1 << 20, file.string());
  std::ofstream(file) << "transient 1\n";
  EXPECT_TRUE(flaky.CheckFault(0).ok());
  EXPECT_THAT(flaky.CheckFault(1).message(), HasSubstr("sim device 1: simulated transient device error"));
  EXPECT_TRUE(flaky.DeviceHealth(1).ok()) << "transient: nothing sticks";
  std::filesystem::remove(file);
  EXPECT_TRUE(flaky.CheckFault(1).ok()) << "the file gone, runs succeed again";
  SimMachine off(1, 1 << 20);
  EXPECT_TRUE(off.CheckFault(0).ok()) << "no fault file configured";
}

TEST(SimFill, DeterministicPerInputAndTypedForEveryDtype) {
  Tensor x = Tensor::Alloc(DType::kFloat32, {2, 3});
  for (int i = 0; i < 6; ++i) x.mutable_data<float>()[i] = static_cast<float>(i);
  Tensor y = x.Clone();
  y.mutable_data<float>()[5] = 7.f;
  EXPECT_EQ(SeedOf({&x}), SeedOf({&x}));
  EXPECT_NE(SeedOf({&x}), SeedOf({&y}));
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt64, DType::kInt32, DType::kUInt8,
                  DType::kBool, DType::kString}) {
    Tensor a = Tensor::Alloc(d, {4, 5}), b = Tensor::Alloc(d, {4, 5});
    ASSERT_TRUE(FillDeterministic(42, &a).ok()) << DTypeName(d);
    ASSERT_TRUE(FillDeterministic(42, &b).ok());
    EXPECT_EQ(a.dtype(), d);
    EXPECT_EQ(a.shape(), (Shape{4, 5}));
    if (d == DType::kString) {
      for (int i = 0; i < 20; ++i) EXPECT_EQ(a.strings()[i], b.strings()[i]);
    } else {
      EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes())) << DTypeName(d);
    }
  }
  Tensor f = Tensor::Alloc(DType::kFloat32, {100});
  ASSERT_TRUE(FillDeterministic(7, &f).ok());
  for (int i = 0; i < 100; ++i) {
    EXPECT_GE(f.data<float>()[i], 0.f);
    EXPECT_LT(f.data<float>()[i], 1.f);
  }
}

TEST(SimBatch, IsTheLeadingDimensionOfTheFirstInputWithOne) {
  Tensor s = Tensor::Alloc(DType::kFloat32, {});
  Tensor x = Tensor::Alloc(DType::kFloat32, {6, 3});
  EXPECT_EQ(BatchOf({&s, &x}), 6);
  EXPECT_EQ(BatchOf({&s}), 1);
  EXPECT_EQ(BatchOf({nullptr, &x}), 6);
}

const char* kNet = R"(
  opset 17
  graph net (x: f32[N,3,8,8]) -> (y) {
    w = const f32[4,3,3,3] random
    c = Conv(x, w) {pads=[1, 1, 1, 1]} @conv1
    p = GlobalAveragePool(c) @pool
    y = Flatten(p) @flat
  }
)";

TEST_F(SimFiles, PlanRunsByWaitingTheProfilesLatency) {
  ASSERT_NE(runtime::FindBackend("sim"), nullptr);
  builder::BuildConfig config;
  config.backend = "sim";
  config.profiles = {plan::Profile{{"x", {{1, 3, 8, 8}, {8, 3, 8, 8}, {32, 3, 8, 8}}}}};
  config.sim_profiles = {Bench("b1.json", 1, 20.0, 50), Bench("b8.json", 8, 48.0, 1000.0 / 48.0)};
  builder::BuildReport report;
  auto p = builder::Build(MustParse(kNet), config, &report);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->fingerprint.backend, "sim");
  ASSERT_TRUE(p->backend_data.count(kLatencyKey));
  std::string notes;
  for (const auto& n : report.backend_notes) notes += n + "\n";
  EXPECT_THAT(notes, HasSubstr("SIMULATED"));

  // Through the plan file: the table is kept.
  const std::string path = (dir_ / "m.plan").string();
  ASSERT_TRUE(plan::WritePlan(*p, path).ok());
  auto engine = runtime::Engine::Load(path);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  EXPECT_THAT((*engine)->backend_engine().Describe(), HasSubstr("SIMULATED GPU"));
  auto ctx = (*engine)->CreateContext();
  ASSERT_TRUE(ctx.ok());
  auto run = [&](int64_t n, float v, double* ms) -> std::vector<Tensor> {
    Tensor x = Tensor::Alloc(DType::kFloat32, {n, 3, 8, 8});
    for (int64_t i = 0; i < x.numel(); ++i) x.mutable_data<float>()[i] = v;
    const auto t0 = Clock::now();
    auto out = (*ctx)->Run({{"x", x}});
    *ms = MsSince(t0);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    return out.ok() ? *out : std::vector<Tensor>{};
  };
  double ms = 0;
  auto a = run(1, 1.f, &ms);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].shape(), (Shape{1, 4}));
  // At least the recorded latency of the batch (At() is checked above); the upper bounds only say
  // that a run does not hang (a loaded 2-core CI machine adds tens of milliseconds).
  EXPECT_GE(ms, 20.0);
  EXPECT_LT(ms, 20.0 + 250.0);
  run(4, 1.f, &ms);  // 20 + 3/7 * 28 = 32 ms: more than batch 1's 20
  EXPECT_GE(ms, 32.0);
  EXPECT_LT(ms, 32.0 + 250.0);
  auto b = run(8, 1.f, &ms);
  EXPECT_EQ(b[0].shape(), (Shape{8, 4}));
  EXPECT_GE(ms, 48.0);
  EXPECT_GE((*ctx)->last_timing().compute_ms, 48.0);
  // Deterministic: the same input gives the same output, another input another.
  auto a2 = run(1, 1.f, &ms);
  auto c = run(1, 2.f, &ms);
  EXPECT_EQ(0, std::memcmp(a[0].raw(), a2[0].raw(), a[0].nbytes()));
  EXPECT_NE(0, std::memcmp(a[0].raw(), c[0].raw(), a[0].nbytes()));
}

TEST_F(SimFiles, ContextsOnOneDeviceTakeTurns) {
  builder::BuildConfig config;
  config.backend = "sim";
  config.profiles = {plan::Profile{{"x", {{1, 3, 8, 8}, {1, 3, 8, 8}, {4, 3, 8, 8}}}}};
  config.sim_profiles = {Bench("b1.json", 1, 30.0, 1000.0 / 30.0)};
  auto p = builder::Build(MustParse(kNet), config, nullptr);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto engine = runtime::Engine::Create(std::move(*p));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto c1 = (*engine)->CreateContext();
  auto c2 = (*engine)->CreateContext();
  ASSERT_TRUE(c1.ok() && c2.ok());
  Tensor x = Tensor::Alloc(DType::kFloat32, {1, 3, 8, 8});
  std::memset(x.mutable_raw(), 0, x.nbytes());
  const auto t0 = Clock::now();
  std::thread other([&] { EXPECT_TRUE((*c2)->Run({{"x", x}}).ok()); });
  EXPECT_TRUE((*c1)->Run({{"x", x}}).ok());
  other.join();
  EXPECT_GE(MsSince(t0), 60.0) << "two 30 ms runs on one simulated device run one after the other";
}

TEST_F(SimFiles, BuildRefusesWhatItCannotSimulate) {
  builder::BuildConfig config;
  config.backend = "sim";
  auto none = builder::Build(MustParse(kNet), config, nullptr);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("--sim-profile FILE"));

  builder::BuildConfig cpu;
  cpu.backend = "reference";
  cpu.sim_profiles = {Bench("b1.json", 1, 1.0, 1000)};
  auto wrong = builder::Build(MustParse(kNet), cpu, nullptr);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.status().message(), HasSubstr("--sim-profile is for --backend sim"));

  // An output whose shape depends on the data: nothing to simulate it with.
  const char* dynamic = R"(
    opset 17
    graph net (x: f32[6]) -> (y) {
      y = NonZero(x) @nz
    }
  )";
  builder::BuildConfig sim;
  sim.backend = "sim";
  sim.sim_profiles = {Bench("b1.json", 1, 1.0, 1000)};
  auto nz = builder::Build(MustParse(dynamic), sim, nullptr);
  ASSERT_FALSE(nz.ok());
  EXPECT_THAT(nz.status().message(), HasSubstr("output shapes that follow from the input shapes"));
}

TEST(SimBackend, SaysItIsASimulation) {
  const runtime::Backend* b = runtime::FindBackend("sim");
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(b->available().ok());
  EXPECT_THAT(b->describe(), HasSubstr("SIMULATED GPU"));
  EXPECT_GE(runtime::DeviceCount(*b), 1);
  EXPECT_TRUE(b->plans_per_shape);
}

}  // namespace
}  // namespace sampan::sim
