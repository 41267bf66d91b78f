// Several models on one GPU (docs/gpu-sharing.md), without a GPU: a pretend backend
// ("one_gpu_test") shows the server one device of 1000 MiB whose memory its engines (weights)
// and contexts (arena, workspace) take and give back, and runs the reference kernels. Models
// load into one server until the device is full: the load that does not fit is refused, naming
// the model, the GPU, the need and what is free, while the models loaded before keep serving and
// statistics' memory_usage shows what each holds on the GPU.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "builder/backend_builder.h"
#include "runtime/backend.h"
#include "runtime/engine.h"
#include "server/core/core.h"
#include "server/test_models.h"

namespace sampan::server {
namespace {

namespace fs = std::filesystem;
using runtime::MemoryKind;
using runtime::MemoryPlace;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kTotal = 1000 * kMiB;
constexpr uint64_t kWeights = 50 * kMiB;    // each engine, on the device from its creation
constexpr uint64_t kArena = 100 * kMiB;     // each context, per shape set it plans
constexpr uint64_t kWorkspace = 20 * kMiB;  // each context

// The device: what is in use now.
struct OneGpu {
  std::mutex mu;
  uint64_t used = 0;
  std::vector<runtime::StreamPriority> priorities;  // of each engine made, in order
  void Take(uint64_t b) {
    std::lock_guard<std::mutex> lock(mu);
    used += b;
  }
  void Give(uint64_t b) {
    std::lock_guard<std::mutex> lock(mu);
    used -= std::min(used, b);
  }
  uint64_t Used() {
    std::lock_guard<std::mutex> lock(mu);
    return used;
  }
};

OneGpu& Gpu() {
  static OneGpu g;
  return g;
}

class OneGpuContext : public runtime::ContextImpl {
 public:
  explicit OneGpuContext(std::unique_ptr<runtime::ContextImpl> inner) : inner_(std::move(inner)) {
    Gpu().Take(kArena + kWorkspace);
  }
  ~OneGpuContext() override { Gpu().Give(kArena + kWorkspace); }
  Result<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& inputs, runtime::Timing* timing) override {
    return inner_->Run(inputs, timing);
  }
  runtime::MemoryReport MemoryUsage() const override {
    runtime::MemoryReport r;
    r.Add(MemoryKind::kArena, MemoryPlace::kDevice, 0, kArena);
    r.Add(MemoryKind::kWorkspace, MemoryPlace::kDevice, 0, kWorkspace);
    return r;
  }

 private:
  std::unique_ptr<runtime::ContextImpl> inner_;
};

class OneGpuEngine : public runtime::BackendEngine {
 public:
  explicit OneGpuEngine(std::unique_ptr<runtime::BackendEngine> inner) : inner_(std::move(inner)) {
    Gpu().Take(kWeights);
  }
  ~OneGpuEngine() override { Gpu().Give(kWeights); }
  Result<std::unique_ptr<runtime::ContextImpl>> CreateContext() override {
    SP_ASSIGN_OR_RETURN(auto ctx, inner_->CreateContext());
    return std::unique_ptr<runtime::ContextImpl>(std::make_unique<OneGpuContext>(std::move(ctx)));
  }
  runtime::MemoryReport MemoryUsage() const override {
    runtime::MemoryReport r;
    r.Add(MemoryKind::kWeights, MemoryPlace::kDevice, 0, kWeights);
    return r;
  }
  Result<runtime::MemoryReport> EstimateContextMemory(
      const std::vector<std::map<std::string, Shape>>& shape_sets) override {
    runtime::MemoryReport r;
    r.Add(MemoryKind::kArena, MemoryPlace::kDevice, 0, kArena * std::max<size_t>(1, shape_sets.size()), true);
    r.Add(MemoryKind::kWorkspace, MemoryPlace::kDevice, 0, kWorkspace, true);
    return r;
  }

 private:
  std::unique_ptr<runtime::BackendEngine> inner_;
};

plan::Fingerprint OneGpuFingerprint() {
  plan::Fingerprint f;
  f.backend = "one_gpu_test";
  f.gpu_name = "One GPU";
  f.compute_capability = "9.0";
  return f;
}

runtime::Backend MakeOneGpuBackend() {
  runtime::Backend b;
  b.name = "one_gpu_test";
  b.available = [] { return Status::Ok(); };
  b.fingerprint = [](int) { return OneGpuFingerprint(); };
  b.device_count = [] { return 1; };
  b.create = [](const plan::Plan& plan,
                const runtime::EngineOptions& o) -> Result<std::unique_ptr<runtime::BackendEngine>> {
    SP_ASSIGN_OR_RETURN(auto inner, runtime::FindBackend("reference")->create(plan, o));
    {
      std::lock_guard<std::mutex> lock(Gpu().mu);
      Gpu().priorities.push_back(o.stream_priority);
    }
    return std::unique_ptr<runtime::BackendEngine>(std::make_unique<OneGpuEngine>(std::move(inner)));
  };
  b.device_memory = [](int device) -> Result<runtime::Backend::DeviceMemory> {
    if (device != 0) return InvalidArgument("no device ", device);
    const uint64_t used = Gpu().Used();
    return runtime::Backend::DeviceMemory{kTotal > used ? kTotal - used : 0, kTotal};
  };
  return b;
}

builder::BackendBuilder MakeOneGpuBuilder() {
  builder::BackendBuilder b;
  b.name = "one_gpu_test";
  b.fingerprint = [](const builder::BuildConfig&) { return OneGpuFingerprint(); };
  b.lower = [](plan::Plan&, const builder::BuildConfig&, builder::BuildReport&) { return Status::Ok(); };
  return b;
}

SAMPAN_REGISTER_BACKEND(one_gpu_test, MakeOneGpuBackend)
SAMPAN_REGISTER_BACKEND_BUILDER(one_gpu_test, MakeOneGpuBuilder)

class GpuSharingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    repo_ = FreshTestDirectory("gpushare");
    const char* old = std::getenv("SAMPAN_GPU_MEMORY_HEADROOM_MIB");
    if (old) old_headroom_ = old;
    setenv("SAMPAN_GPU_MEMORY_HEADROOM_MIB", "100", 1);
  }
  void TearDown() override {
    core_.reset();
    fs::remove_all(repo_);
    if (old_headroom_)
      setenv("SAMPAN_GPU_MEMORY_HEADROOM_MIB", old_headroom_->c_str(), 1);
    else
      unsetenv("SAMPAN_GPU_MEMORY_HEADROOM_MIB");
    std::lock_guard<std::mutex> lock(Gpu().mu);
    Gpu().priorities.clear();
  }
  // A model y = x + bias (x: f32[N, 4]) on the one GPU, `instances` instances, batch 1 (one
  // shape set per context: 120 MiB each), stream priority as given.
  void AddModelDir(const std::string& name, int instances, float bias, const std::string& priority) {
    fs::create_directories(repo_ / name / "1");
    std::ofstream(repo_ / name / "1" / "model.onnx", std::ios::binary) << AddModel({4}, true, bias);
    std::ofstream(repo_ / name / "config.pbtxt")
        << "max_batch_size: 1\nsampan { backend: \"one_gpu_test\" skip_warmup: true }\n"
        << "instance_group [{ kind: KIND_GPU count: " << instances << " }]\n"
        << "optimization { priority: " << priority << " }\n";
  }
  void StartCore() {
    CoreOptions o;
    o.repository = repo_.string();
    o.control_mode = CoreOptions::ControlMode::kExplicit;
    o.threads_per_instance = 1;
    auto core = Core::Start(o);
    ASSERT_TRUE(core.ok()) << core.status().ToString();
    core_ = std::move(core).value();
  }
  Result<float> InferOne(const std::string& model, float x) {
    InferRequest r;
    r.model_name = model;
    InferTensor t;
    t.name = "x";
    t.dtype = DType::kFloat32;
    t.shape = {1, 4};
    t.data = Tensor::FromVector(DType::kFloat32, std::vector<float>(4, x), t.shape);
    r.inputs.push_back(std::move(t));
    std::promise<Result<InferResponse>> p;
    auto f = p.get_future();
    core_->Infer(std::move(r), [&p](Result<InferResponse> res) { p.set_value(std::move(res)); });
    SP_ASSIGN_OR_RETURN(InferResponse resp, f.get());
    if (resp.outputs.empty()) return Internal("no output");
    return resp.outputs[0].data.data<float>()[0];
  }
  uint64_t GpuBytesOf(const std::string& model) {
    auto stats = core_->Statistics(model, "");
    EXPECT_TRUE(stats.ok()) << stats.status().ToString();
    if (!stats.ok() || stats->empty()) return 0;
    uint64_t sum = 0;
    for (const MemoryUsage& m : (*stats)[0].memory_usage)
      if (m.type == "GPU" && m.id == 0) sum += m.byte_size;
    return sum;
  }

  fs::path repo_;
  std::optional<std::string> old_headroom_;
  std::unique_ptr<Core> core_;
};

TEST_F(GpuSharingTest, TheLoadThatOverflowsTheGpuIsRefusedAndTheOthersKeepServing) {
  // 1000 MiB, 100 MiB of headroom. resnet: 50 + 2 x 120 = 290 MiB; yolo the same (580 in use);
  // ocr: its engine's 50 MiB go on (630 in use, 370 free), then 3 x 120 = 360 MiB would leave
  // 10 MiB, under the headroom: refused, and its engine's weights given back.
  AddModelDir("resnet", 2, 1.0f, "PRIORITY_MAX");
  AddModelDir("yolo", 2, 2.0f, "PRIORITY_MIN");
  AddModelDir("ocr", 3, 3.0f, "PRIORITY_DEFAULT");
  StartCore();
  ASSERT_TRUE(core_->LoadModel("resnet").ok());
  ASSERT_TRUE(core_->LoadModel("yolo").ok());
  EXPECT_EQ(Gpu().Used(), 580 * kMiB);
  EXPECT_EQ(GpuBytesOf("resnet"), 290 * kMiB) << "statistics' memory_usage: weights, arenas, workspaces";
  EXPECT_EQ(GpuBytesOf("yolo"), 290 * kMiB);

  Status refused = core_->LoadModel("ocr");
  ASSERT_FALSE(refused.ok());
  const std::string& why = refused.message();
  for (const char* part : {"model 'ocr' does not fit on GPU 0", "3 instance(s) need 360.0 MiB", "arena 100.0 MiB",
                           "workspace 20.0 MiB", "370.0 MiB of 1000.0 MiB is free", "headroom of 100.0 MiB"})
    EXPECT_NE(why.find(part), std::string::npos) << "missing '" << part << "' in: " << why;
  EXPECT_FALSE(*core_->ModelReady("ocr", ""));
  EXPECT_EQ(Gpu().Used(), 580 * kMiB) << "the refused load gave its weights back";
  bool listed = false;
  for (const RepositoryEntry& e : core_->RepositoryIndex(false))
    if (e.name == "ocr") {
      listed = true;
      EXPECT_EQ(e.state, ModelState::kUnavailable);
      EXPECT_NE(e.reason.find("does not fit on GPU 0"), std::string::npos) << e.reason;
    }
  EXPECT_TRUE(listed);

  // The models loaded before serve on.
  for (int i = 0; i < 4; ++i) {
    auto r = InferOne("resnet", static_cast<float>(i));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, static_cast<float>(i) + 1.0f);
    auto y = InferOne("yolo", static_cast<float>(i));
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    EXPECT_EQ(*y, static_cast<float>(i) + 2.0f);
  }
  EXPECT_TRUE(*core_->ModelReady("resnet", ""));
  EXPECT_TRUE(*core_->ModelReady("yolo", ""));

  // Each model's engines got its priority (they share the device through their own streams).
  {
    std::lock_guard<std::mutex> lock(Gpu().mu);
    ASSERT_GE(Gpu().priorities.size(), 3u);
    EXPECT_EQ(Gpu().priorities[0], runtime::StreamPriority::kHigh);
    EXPECT_EQ(Gpu().priorities[1], runtime::StreamPriority::kLow);
    EXPECT_EQ(Gpu().priorities[2], runtime::StreamPriority::kDefault);
  }

  // With yolo unloaded there is room: ocr loads.
  ASSERT_TRUE(core_->UnloadModel("yolo").ok());
  Status loaded = Status::Ok();
  for (int i = 0; i < 200; ++i) {  // unloading completes once yolo's requests are done
    loaded = core_->LoadModel("ocr");
    if (loaded.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  auto o = InferOne("ocr", 1.0f);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(*o, 4.0f);
  EXPECT_EQ(GpuBytesOf("ocr"), 410 * kMiB);
}

}  // namespace
}  // namespace sampan::server
