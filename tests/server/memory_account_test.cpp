// The server's memory account (server/core/memory_account.h): statistics' memory_usage summed
// from the engines' and contexts' figures, the shapes a version plans, and the GPU admission of
// a load against a device backend double whose free memory the test sets.
#include "server/core/memory_account.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "builder/builder.h"
#include "passes/pass_test_util.h"
#include "runtime/backend.h"

namespace sampan::server {
namespace {

using passes::testing::MustParse;
using runtime::MemoryKind;
using runtime::MemoryPlace;

constexpr uint64_t kMiB = uint64_t{1} << 20;

const char* kNet = R"(
  opset 17
  graph net (x: f32[N,8]) -> (y) {
    w = const f32[8,16] random
    m = MatMul(x, w)
    y = Relu(m)
  }
)";

plan::Plan PlanFor(const std::string& backend) {
  builder::BuildConfig config;
  for (const passes::PassDef* d : passes::AllPasses()) config.disabled_passes.insert(d->name);
  auto p = builder::Build(MustParse(kNet), config, nullptr);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  p->fingerprint.backend = backend;
  p->options.portable = true;  // the double's fingerprint has nothing of the reference backend's
  return std::move(p).value();
}

// ---------------------------------------------------------------- a device backend double

uint64_t g_free = 0;           // what the double's device has free
int g_estimates = 0;           // EstimateContextMemory calls
size_t g_shape_sets_seen = 0;  // shape sets the last estimate was given

// Reference engines that say they hold 10 MiB of weights on their device and that a context
// takes 100 MiB of arena per shape set plus 32 MiB of workspace there and 1 MiB of staging.
class DeviceDoubleEngine : public runtime::BackendEngine {
 public:
  DeviceDoubleEngine(std::unique_ptr<runtime::BackendEngine> inner, int device)
      : inner_(std::move(inner)), device_(device) {}
  Result<std::unique_ptr<runtime::ContextImpl>> CreateContext() override { return inner_->CreateContext(); }
  runtime::MemoryReport MemoryUsage() const override {
    runtime::MemoryReport r;
    r.Add(MemoryKind::kWeights, MemoryPlace::kDevice, device_, 10 * kMiB);
    return r;
  }
  Result<runtime::MemoryReport> EstimateContextMemory(
      const std::vector<std::map<std::string, Shape>>& shape_sets) override {
    ++g_estimates;
    g_shape_sets_seen = shape_sets.size();
    runtime::MemoryReport r;
    r.Add(MemoryKind::kArena, MemoryPlace::kDevice, device_, 100 * kMiB * shape_sets.size(), true);
    r.Add(MemoryKind::kWorkspace, MemoryPlace::kDevice, device_, 32 * kMiB, true);
    r.Add(MemoryKind::kStaging, MemoryPlace::kPinnedHost, 0, kMiB, true);
    return r;
  }

 private:
  std::unique_ptr<runtime::BackendEngine> inner_;
  int device_;
};

runtime::Backend MakeDeviceDouble() {
  runtime::Backend b;
  b.name = "memory_account_gpu";
  b.available = [] { return Status::Ok(); };
  b.fingerprint = [](int) {
    plan::Fingerprint f;
    f.backend = "memory_account_gpu";
    return f;
  };
  b.create = [](const plan::Plan& plan,
                const runtime::EngineOptions& o) -> Result<std::unique_ptr<runtime::BackendEngine>> {
    SP_ASSIGN_OR_RETURN(auto inner, runtime::FindBackend("reference")->create(plan, o));
    return std::unique_ptr<runtime::BackendEngine>(std::make_unique<DeviceDoubleEngine>(std::move(inner), o.device));
  };
  b.device_count = [] { return 2; };
  b.device_memory = [](int device) -> Result<runtime::Backend::DeviceMemory> {
    if (device > 1) return InvalidArgument("no device ", device);
    return runtime::Backend::DeviceMemory{g_free, 80 * 1024 * kMiB};
  };
  return b;
}
SAMPAN_REGISTER_BACKEND(memory_account_gpu, MakeDeviceDouble)

//! An engine of `plan` (its graph shared with other copies) bound by `backend`.
std::shared_ptr<runtime::Engine> EngineOn(const std::string& backend, int device, plan::Plan plan) {
  plan.fingerprint.backend = backend;
  runtime::EngineOptions o;
  o.device = device;
  auto e = runtime::Engine::Create(std::move(plan), o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? *e : nullptr;
}

// ---------------------------------------------------------------- statistics

TEST(MemoryAccount, TritonTypesPerPlace) {
  runtime::MemoryReport r;
  r.Add(MemoryKind::kArena, MemoryPlace::kDevice, 1, 300);
  r.Add(MemoryKind::kWeights, MemoryPlace::kDevice, 1, 100);
  r.Add(MemoryKind::kWeights, MemoryPlace::kDevice, 0, 7);
  r.Add(MemoryKind::kStaging, MemoryPlace::kPinnedHost, 0, 64);
  r.Add(MemoryKind::kPlanWeights, MemoryPlace::kHost, 0, 1000);
  r.Add(MemoryKind::kArena, MemoryPlace::kHost, 0, 24);
  const std::vector<MemoryUsage> u = TritonMemoryUsage(r);
  ASSERT_EQ(u.size(), 4u);
  EXPECT_EQ((std::tuple(u[0].type, u[0].id, u[0].byte_size)),
            (std::tuple(std::string("CPU"), int64_t{0}, uint64_t{1024})));
  EXPECT_EQ((std::tuple(u[1].type, u[1].byte_size)), (std::tuple(std::string("CPU_PINNED"), uint64_t{64})));
  EXPECT_EQ((std::tuple(u[2].type, u[2].id, u[2].byte_size)),
            (std::tuple(std::string("GPU"), int64_t{0}, uint64_t{7})));
  EXPECT_EQ((std::tuple(u[3].type, u[3].id, u[3].byte_size)),
            (std::tuple(std::string("GPU"), int64_t{1}, uint64_t{400})));
}

TEST(MemoryAccount, VersionCountsThePlanOnceAndEveryContextsArenas) {
  plan::Plan plan = PlanFor("reference");
  const uint64_t weights = 8 * 16 * sizeof(float);
  // Two engines of one plan (its graph shared), as the server makes one per device.
  std::vector<std::shared_ptr<runtime::Engine>> engines{EngineOn("reference", 0, plan), EngineOn("reference", 0, plan)};
  std::vector<std::unique_ptr<runtime::Context>> contexts;
  auto none = VersionMemoryUsage(engines, contexts);
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].type, "CPU");
  EXPECT_EQ(none[0].byte_size, weights);
  for (auto& e : engines) contexts.push_back(std::move(e->CreateContext()).value());
  ASSERT_TRUE(contexts[0]->Run({{"x", *Tensor::Zeros(DType::kFloat32, {3, 8})}}).ok());
  const uint64_t arena = contexts[0]->MemoryUsage().Bytes(MemoryKind::kArena, MemoryPlace::kHost);
  ASSERT_GT(arena, 0u);
  auto after = VersionMemoryUsage(engines, contexts);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].byte_size, weights + arena);
  // Another plan with the same contents is another copy in memory.
  engines.push_back(EngineOn("reference", 0, PlanFor("reference")));
  EXPECT_EQ(VersionMemoryUsage(engines, contexts)[0].byte_size, 2 * weights + arena);
  // A device engine adds its device copy under GPU, by device.
  engines.push_back(EngineOn("memory_account_gpu", 1, plan));
  auto gpu = VersionMemoryUsage(engines, contexts);
  ASSERT_EQ(gpu.size(), 2u);
  EXPECT_EQ(gpu[0].byte_size, 2 * weights + arena);  // the plan's host weights again shared
  EXPECT_EQ((std::tuple(gpu[1].type, gpu[1].id, gpu[1].byte_size)),
            (std::tuple(std::string("GPU"), int64_t{1}, 10 * kMiB)));
}

TEST(MemoryAccount, PlannedShapesPerBatchBucket) {
  auto g = MustParse(R"(
    opset 17
    graph g (x: f32[N,3,4], i: i64[N]) -> (y) {
      y = Identity(x)
    })");
  auto sets = PlannedShapes(*g, {1, 4, 8});
  ASSERT_TRUE(sets.ok()) << sets.status().ToString();
  ASSERT_EQ(sets->size(), 3u);
  EXPECT_EQ((*sets)[1].at("x"), (Shape{4, 3, 4}));
  EXPECT_EQ((*sets)[2].at("i"), (Shape{8}));
  // Without batching the shapes must be static.
  auto unbatched = PlannedShapes(*g, {});
  EXPECT_EQ(unbatched.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(unbatched.status().message().find("input 'x'"), std::string::npos) << unbatched.status().ToString();
  auto seq = MustParse(R"(
    opset 17
    graph g (x: f32[N,S]) -> (y) {
      y = Identity(x)
    })");
  auto var = PlannedShapes(*seq, {1, 2});
  EXPECT_EQ(var.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(var.status().message().find("dimension 1 variable"), std::string::npos) << var.status().ToString();
  auto fixed = MustParse(R"(
    opset 17
    graph g (x: f32[2,5]) -> (y) {
      y = Identity(x)
    })");
  auto one = PlannedShapes(*fixed, {});
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].at("x"), (Shape{2, 5}));
}

// ---------------------------------------------------------------- admission

TEST(MemoryAccount, AdmitsWhatFitsAndRefusesWhatDoesNot) {
  std::vector<std::shared_ptr<runtime::Engine>> engines{
      EngineOn("memory_account_gpu", 1, PlanFor("memory_account_gpu"))};
  const std::vector<std::map<std::string, Shape>> buckets{{{"x", {1, 8}}}, {{"x", {4, 8}}}};
  // Per instance: 2 x 100 MiB of arena + 32 MiB of workspace = 232 MiB; three instances 696 MiB.
  const std::vector<size_t> three{0, 0, 0};
  g_free = 696 * kMiB + 64 * kMiB;
  g_estimates = 0;
  auto admitted = AdmitOnGpus("resnet", engines, three, buckets, 64 * kMiB);
  ASSERT_TRUE(admitted.ok()) << admitted.status().ToString();
  EXPECT_EQ(g_estimates, 1) << "one estimate per engine";
  EXPECT_EQ(g_shape_sets_seen, 2u);
  EXPECT_EQ(admitted->bytes(1), 696 * kMiB);
  EXPECT_EQ(admitted->bytes(0), 0u);
  EXPECT_EQ(GpuBytesPromised(1), 696 * kMiB);
  // While the first load's contexts have not allocated, a second one sees the device as taken.
  g_free = 900 * kMiB;  // 900 - 696 promised - 64 headroom = 140 MiB left
  auto second = AdmitOnGpus("yolo", engines, {0}, buckets, 64 * kMiB);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  const std::string& why = second.status().message();
  for (const char* part : {"model 'yolo' does not fit on GPU 1", "1 instance(s) need 232.0 MiB", "arena 200.0 MiB",
                           "workspace 32.0 MiB", "weights, 10.0 MiB, are loaded already",
                           "900.0 MiB of 80.0 GiB is free", "headroom of 64.0 MiB", "696.0 MiB promised"})
    EXPECT_NE(why.find(part), std::string::npos) << "missing '" << part << "' in: " << why;
  // Once the first load is through (its reservation dropped), the second fits.
  admitted->Release();
  EXPECT_EQ(GpuBytesPromised(1), 0u);
  auto retry = AdmitOnGpus("yolo", engines, {0}, buckets, 64 * kMiB);
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  {
    GpuReservation moved = std::move(retry).value();
    EXPECT_EQ(GpuBytesPromised(1), 232 * kMiB);
  }
  EXPECT_EQ(GpuBytesPromised(1), 0u) << "a reservation gives its bytes back when it goes";
  // The headroom counts: 233 MiB free with 2 MiB kept back does not take 232 MiB.
  g_free = 233 * kMiB;
  EXPECT_FALSE(AdmitOnGpus("yolo", engines, {0}, buckets, 2 * kMiB).ok());
  EXPECT_TRUE(AdmitOnGpus("yolo", engines, {0}, buckets, 1 * kMiB).ok());
}

TEST(MemoryAccount, HostEnginesAndEnginesWithoutInstancesAreNotChecked) {
  std::vector<std::shared_ptr<runtime::Engine>> engines{
      EngineOn("reference", 0, PlanFor("reference")), EngineOn("memory_account_gpu", 0, PlanFor("memory_account_gpu"))};
  g_free = 0;  // nothing free: only an engine that is checked can be refused
  g_estimates = 0;
  auto host_only = AdmitOnGpus("m", engines, {0, 0}, {{{"x", {1, 8}}}}, 0);
  ASSERT_TRUE(host_only.ok()) << host_only.status().ToString();
  EXPECT_EQ(g_estimates, 0);
  auto on_gpu = AdmitOnGpus("m", engines, {0, 1}, {{{"x", {1, 8}}}}, 0);
  EXPECT_FALSE(on_gpu.ok());
  EXPECT_NE(on_gpu.status().message().find("model 'm' does not fit on GPU 0"), std::string::npos)
      << on_gpu.status().ToString();
  auto bad = AdmitOnGpus("m", engines, {5}, {}, 0);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  // Shapes the plan does not take are the estimate's error, with the model named.
  auto shapes = AdmitOnGpus("m", engines, {1}, {{{"x", {1, 9}}}}, 0);
  EXPECT_NE(shapes.status().message().find("model 'm': estimating an instance's memory on GPU 0"), std::string::npos)
      << shapes.status().ToString();
}

TEST(MemoryAccount, HeadroomFromTheEnvironment) {
  unsetenv("SAMPAN_GPU_MEMORY_HEADROOM_MIB");
  EXPECT_EQ(*GpuHeadroomBytes(), 512 * kMiB);
  setenv("SAMPAN_GPU_MEMORY_HEADROOM_MIB", "100", 1);
  EXPECT_EQ(*GpuHeadroomBytes(), 100 * kMiB);
  setenv("SAMPAN_GPU_MEMORY_HEADROOM_MIB", "1O0", 1);
  auto bad = GpuHeadroomBytes();
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'1O0'"), std::string::npos);
  setenv("SAMPAN_GPU_MEMORY_HEADROOM_MIB", "-1", 1);
  EXPECT_FALSE(GpuHeadroomBytes().ok());
  unsetenv("SAMPAN_GPU_MEMORY_HEADROOM_MIB");
}

}  // namespace
}  // namespace sampan::server
