// Serving on several devices without several GPUs: a pretend backend
// ("twin_test") shows the runtime N devices, each of a named type, and runs
// the reference kernels behind them. It checks instance placement (every
// device, or the listed GPUs), one plan build and cache file per device type,
// a device that fails with a sticky error going out of service while the
// others serve, and the per-device metrics.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <regex>
#include <thread>

#include "builder/backend_builder.h"
#include "runtime/backend.h"
#include "runtime/engine.h"
#include "server/core/core.h"
#include "server/core/model_loader.h"
#include "server/repository/repository.h"
#include "server/test_models.h"

namespace sampan::server {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// ---------------------------------------------------------------- the pretend devices

struct TwinDevices {
  std::mutex mu;
  std::vector<std::string> types;     // per device: its GPU name (equal names = identical GPUs)
  std::vector<int> fail_at;           // per device: the run that hits a sticky error (0 = never)
  std::vector<int> runs;              // per device: runs started
  std::vector<bool> broken;           // per device: sticky error seen
  std::map<std::string, int> builds;  // plan builds, by device type
  std::chrono::microseconds run_time{0};

  void Reset(std::vector<std::string> t) {
    std::lock_guard<std::mutex> lock(mu);
    types = std::move(t);
    fail_at.assign(types.size(), 0);
    runs.assign(types.size(), 0);
    broken.assign(types.size(), false);
    builds.clear();
    run_time = std::chrono::microseconds(0);
  }
  plan::Fingerprint Fingerprint(int device) {
    std::lock_guard<std::mutex> lock(mu);
    plan::Fingerprint f;
    f.backend = "twin_test";
    if (device >= 0 && device < static_cast<int>(types.size())) {
      f.gpu_name = types[static_cast<size_t>(device)];
      f.compute_capability = f.gpu_name == "Twin B" ? "8.0" : "9.0";
    }
    return f;
  }
};

TwinDevices& Twins() {
  static TwinDevices d;
  return d;
}

Status StickyError(int device) {
  return Internal("device error: an illegal memory access was encountered (test, device ", device, ")");
}

class TwinContext : public runtime::ContextImpl {
 public:
  TwinContext(std::unique_ptr<runtime::ContextImpl> inner, int device) : inner_(std::move(inner)), device_(device) {}
  Result<std::vector<Tensor>> Run(const std::map<std::string, Tensor>& inputs, runtime::Timing* timing) override {
    TwinDevices& t = Twins();
    std::chrono::microseconds pause;
    {
      std::lock_guard<std::mutex> lock(t.mu);
      const size_t d = static_cast<size_t>(device_);
      const int run = ++t.runs[d];
      if (t.fail_at[d] > 0 && run == t.fail_at[d]) {
        t.broken[d] = true;
        return StickyError(device_);
      }
      pause = t.run_time;
    }
    std::this_thread::sleep_for(pause);
    return inner_->Run(inputs, timing);
  }

 private:
  std::unique_ptr<runtime::ContextImpl> inner_;
  int device_;
};

class TwinEngine : public runtime::BackendEngine {
 public:
  TwinEngine(std::unique_ptr<runtime::BackendEngine> inner, int device) : inner_(std::move(inner)), device_(device) {}
  Result<std::unique_ptr<runtime::ContextImpl>> CreateContext() override {
    SP_ASSIGN_OR_RETURN(auto ctx, inner_->CreateContext());
    return std::unique_ptr<runtime::ContextImpl>(std::make_unique<TwinContext>(std::move(ctx), device_));
  }
  Status Health() const override {
    std::lock_guard<std::mutex> lock(Twins().mu);
    return Twins().broken[static_cast<size_t>(device_)] ? StickyError(device_) : Status::Ok();
  }

 private:
  std::unique_ptr<runtime::BackendEngine> inner_;
  int device_;
};

runtime::Backend MakeTwinBackend() {
  runtime::Backend b;
  b.name = "twin_test";
  b.available = [] { return Status::Ok(); };
  b.fingerprint = [](int device) { return Twins().Fingerprint(device); };
  b.device_count = [] {
    std::lock_guard<std::mutex> lock(Twins().mu);
    return static_cast<int>(Twins().types.size());
  };
  b.create = [](const plan::Plan& plan,
                const runtime::EngineOptions& o) -> Result<std::unique_ptr<runtime::BackendEngine>> {
    SP_ASSIGN_OR_RETURN(auto inner, runtime::FindBackend("reference")->create(plan, o));
    return std::unique_ptr<runtime::BackendEngine>(std::make_unique<TwinEngine>(std::move(inner), o.device));
  };
  return b;
}

builder::BackendBuilder MakeTwinBuilder() {
  builder::BackendBuilder b;
  b.name = "twin_test";
  b.fingerprint = [](const builder::BuildConfig& c) { return Twins().Fingerprint(c.device); };
  b.lower = [](plan::Plan& plan, const builder::BuildConfig& c, builder::BuildReport&) {
    const std::string type = Twins().Fingerprint(c.device).gpu_name;
    std::lock_guard<std::mutex> lock(Twins().mu);
    ++Twins().builds[type];
    return Status::Ok();
  };
  return b;
}

SAMPAN_REGISTER_BACKEND(twin_test, MakeTwinBackend)
SAMPAN_REGISTER_BACKEND_BUILDER(twin_test, MakeTwinBuilder)

class MultiDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    repo_ = FreshTestDirectory("mgpu");
    fs::create_directories(repo_ / "m" / "1");
    std::ofstream(repo_ / "m" / "1" / "model.onnx", std::ios::binary)
        << AddModel({4}, true, 1.0f);  // y = x + 1, x: f32[N, 4]
    Twins().Reset({"Twin A", "Twin A"});
  }
  void TearDown() override {
    core_.reset();
    fs::remove_all(repo_);
    Twins().Reset({});
  }
  void WriteConfig(const std::string& instance_group) {
    std::ofstream(repo_ / "m" / "config.pbtxt") << "max_batch_size: 4\nsampan { backend: \"twin_test\" }\n"
                                                << instance_group << "\n";
  }
  Result<LoadedModel> Load() {
    bool has_file = false;
    SP_ASSIGN_OR_RETURN(ModelConfig c, ReadModelConfig((repo_ / "m").string(), "m", &has_file));
    VersionLoadOptions o;
    o.threads_per_instance = 1;
    return LoadModelFiles((repo_ / "m").string(), 1, c, has_file, o);
  }
  std::vector<std::string> CachedPlans() {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(repo_ / "m" / "1" / ".sampan"))
      if (e.path().extension() == ".plan") names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  void StartCore() {
    CoreOptions o;
    o.repository = repo_.string();
    o.threads_per_instance = 1;
    auto core = Core::Start(o);
    ASSERT_TRUE(core.ok()) << core.status().ToString();
    core_ = std::move(core).value();
  }
  static InferRequest Request(float value) {
    InferRequest r;
    r.model_name = "m";
    InferTensor t;
    t.name = "x";
    t.dtype = DType::kFloat32;
    t.shape = {1, 4};
    t.data = Tensor::FromVector(DType::kFloat32, std::vector<float>(4, value), t.shape);
    r.inputs.push_back(std::move(t));
    return r;
  }
  // Sends `n` requests at once; returns their answers in request order.
  std::vector<Result<InferResponse>> InferMany(int n) {
    std::vector<std::promise<Result<InferResponse>>> promises(static_cast<size_t>(n));
    std::vector<std::future<Result<InferResponse>>> futures;
    for (auto& p : promises) futures.push_back(p.get_future());
    for (int i = 0; i < n; ++i)
      core_->Infer(Request(static_cast<float>(i)), [&promises, i](Result<InferResponse> r) {
        promises[static_cast<size_t>(i)].set_value(std::move(r));
      });
    std::vector<Result<InferResponse>> out;
    for (auto& f : futures) out.push_back(f.get());
    return out;
  }
  // The value of one series in the /metrics text; -1 when absent.
  double Metric(const std::string& text, const std::string& series) {
    const size_t at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size() + 2));
  }

  fs::path repo_;
  std::unique_ptr<Core> core_;
};

// ---------------------------------------------------------------- placement and plans

TEST_F(MultiDeviceTest, WithoutGpusListedEveryDeviceGetsTheGroupsInstances) {
  Twins().Reset({"Twin A", "Twin A", "Twin A"});
  WriteConfig("instance_group [{ kind: KIND_GPU count: 2 }]");
  auto loaded = Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->engines.size(), 3u);
  for (int d = 0; d < 3; ++d) EXPECT_EQ(loaded->engines[static_cast<size_t>(d)]->options().device, d);
  EXPECT_EQ(loaded->instance_engine, (std::vector<size_t>{0, 0, 1, 1, 2, 2}));
}

TEST_F(MultiDeviceTest, ListedGpusOnlyAndAMissingOneFailsTheLoad) {
  Twins().Reset({"Twin A", "Twin A", "Twin A"});
  WriteConfig("instance_group [{ kind: KIND_GPU count: 1 gpus: [2] }, { kind: KIND_GPU count: 3 gpus: [0] }]");
  auto loaded = Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->engines.size(), 2u);
  EXPECT_EQ(loaded->engines[0]->options().device, 2);
  EXPECT_EQ(loaded->engines[1]->options().device, 0);
  EXPECT_EQ(loaded->instance_engine, (std::vector<size_t>{0, 1, 1, 1}));

  WriteConfig("instance_group [{ kind: KIND_GPU gpus: [0] }, { kind: KIND_GPU gpus: [1, 5] }]");
  auto missing = Load();
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  for (const char* part : {"config.pbtxt: instance_group[1]", "GPU 5 does not exist", "sees 3 devices (0..2)"})
    EXPECT_NE(missing.status().message().find(part), std::string::npos) << part << " in " << missing.status().message();
}

TEST_F(MultiDeviceTest, CudaGraphsAreOnUnlessTheConfigTurnsThemOff) {
  Twins().Reset({"Twin A"});
  WriteConfig("instance_group [{ kind: KIND_GPU count: 1 }]");
  auto on = Load();
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE(on->engines[0]->options().use_cuda_graph);
  WriteConfig("instance_group [{ kind: KIND_GPU count: 1 }] optimization { cuda { graphs: false } }");
  auto off = Load();
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE(off->engines[0]->options().use_cuda_graph);
  WriteConfig("instance_group [{ kind: KIND_GPU count: 1 }] optimization { cuda { graphs: true } }");
  auto explicit_on = Load();
  ASSERT_TRUE(explicit_on.ok()) << explicit_on.status().ToString();
  EXPECT_TRUE(explicit_on->engines[0]->options().use_cuda_graph);
  // The parts of Triton's optimization policy Sampan does not implement are refused, not ignored.
  WriteConfig("instance_group [{ kind: KIND_GPU count: 1 }] optimization { input_pinned_memory { enable: true } }");
  auto unknown = Load();
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("input_pinned_memory"), std::string::npos) << unknown.status().message();
}

TEST_F(MultiDeviceTest, PriorityReachesEveryEngineAsItsStreamPriority) {
  Twins().Reset({"Twin A", "Twin A"});
  const std::pair<const char*, runtime::StreamPriority> cases[] = {
      {"", runtime::StreamPriority::kDefault},
      {"optimization { priority: PRIORITY_DEFAULT }", runtime::StreamPriority::kDefault},
      {"optimization { priority: PRIORITY_MAX }", runtime::StreamPriority::kHigh},
      {"optimization { priority: PRIORITY_MIN cuda { graphs: false } }", runtime::StreamPriority::kLow},
  };
  for (const auto& [optimization, want] : cases) {
    WriteConfig(std::string("instance_group [{ kind: KIND_GPU count: 2 }] ") + optimization);
    auto loaded = Load();
    ASSERT_TRUE(loaded.ok()) << optimization << ": " << loaded.status().ToString();
    ASSERT_EQ(loaded->engines.size(), 2u);
    for (const auto& e : loaded->engines)
      EXPECT_EQ(e->options().stream_priority, want) << optimization << ": " << runtime::StreamPriorityName(want);
  }
  // The host backends take it and ignore it (one config serves on a GPU or a CPU).
  WriteConfig("instance_group [{ kind: KIND_CPU count: 1 }] optimization { priority: PRIORITY_MAX }");
  auto cpu = Load();
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_EQ(cpu->engines[0]->options().stream_priority, runtime::StreamPriority::kHigh);
}

TEST_F(MultiDeviceTest, KindCpuStaysOnOneDevice) {
  WriteConfig("instance_group [{ kind: KIND_CPU count: 2 }]");
  auto loaded = Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->engines.size(), 1u);
  EXPECT_EQ(loaded->engines[0]->options().device, 0);
}

TEST_F(MultiDeviceTest, IdenticalDevicesShareOnePlanAndOtherTypesGetTheirOwn) {
  Twins().Reset({"Twin A", "Twin B", "Twin A"});
  WriteConfig("instance_group [{ kind: KIND_GPU count: 1 }]");
  auto loaded = Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->engines.size(), 3u);
  EXPECT_EQ(Twins().builds, (std::map<std::string, int>{{"Twin A", 1}, {"Twin B", 1}}));
  const auto& e = loaded->engines;
  EXPECT_EQ(e[0]->plan().fingerprint.gpu_name, "Twin A");
  EXPECT_EQ(e[1]->plan().fingerprint.gpu_name, "Twin B");
  EXPECT_EQ(e[2]->plan().fingerprint.gpu_name, "Twin A");
  EXPECT_EQ(e[0]->plan().graph.get(), e[2]->plan().graph.get()) << "devices 0 and 2 run one plan";
  EXPECT_NE(e[0]->plan().graph.get(), e[1]->plan().graph.get());
  EXPECT_EQ(CachedPlans(),
            (std::vector<std::string>{"model.twin_test.Twin_A_sm90.plan", "model.twin_test.Twin_B_sm80.plan"}));

  // Loaded again: both plans come from the cache, still one per type.
  auto again = Load();
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(Twins().builds, (std::map<std::string, int>{{"Twin A", 1}, {"Twin B", 1}}));
  EXPECT_EQ(again->engines[0]->plan().graph.get(), again->engines[2]->plan().graph.get());

  // A new device type appears (the machine changed): only it is built.
  Twins().Reset({"Twin A", "Twin C"});
  auto changed = Load();
  ASSERT_TRUE(changed.ok()) << changed.status().ToString();
  EXPECT_EQ(Twins().builds, (std::map<std::string, int>{{"Twin C", 1}}));
  EXPECT_EQ(CachedPlans().size(), 3u);
}

// ---------------------------------------------------------------- a device fails

TEST_F(MultiDeviceTest, AFailedDeviceLeavesServiceWhileTheOtherServes) {
  WriteConfig("instance_group [{ kind: KIND_GPU count: 1 }]");
  StartCore();
  ASSERT_TRUE(*core_->ModelReady("m", ""));
  {
    std::lock_guard<std::mutex> lock(Twins().mu);
    Twins().fail_at[1] = 3;                              // device 1's third run hits a sticky error
    Twins().run_time = std::chrono::microseconds(2000);  // a queue builds up: both devices take work
  }
  auto first = InferMany(60);
  int failed = 0;
  for (const auto& r : first) {
    if (r.ok()) continue;
    ++failed;
    EXPECT_NE(r.status().message().find("illegal memory access was encountered (test, device 1)"), std::string::npos)
        << r.status().ToString();
  }
  EXPECT_EQ(failed, 1) << "only the batch running when the error hit fails (no retry elsewhere)";
  EXPECT_TRUE(core_->Ready());
  EXPECT_TRUE(*core_->ModelReady("m", ""));

  auto later = InferMany(40);
  for (size_t i = 0; i < later.size(); ++i) {
    ASSERT_TRUE(later[i].ok()) << later[i].status().ToString();
    EXPECT_EQ(later[i]->outputs[0].data.data<float>()[0], static_cast<float>(i) + 1.0f);
  }
  {
    std::lock_guard<std::mutex> lock(Twins().mu);
    EXPECT_EQ(Twins().runs[1], 3) << "device 1 took no batch after its error";
    EXPECT_EQ(Twins().runs[0], 60 + 40 - 3);
  }

  // Per-device counts: device 1 ran two batches successfully, device 0 the rest; they add up.
  const std::string text = core_->RenderMetrics();
  const std::string labels = "{model=\"m\",version=\"1\",device=\"";
  const double exec0 = Metric(text, "sampan_device_execution_count" + labels + "0\",backend=\"twin_test\"}");
  const double exec1 = Metric(text, "sampan_device_execution_count" + labels + "1\",backend=\"twin_test\"}");
  const double inf0 = Metric(text, "sampan_device_inference_count" + labels + "0\",backend=\"twin_test\"}");
  const double inf1 = Metric(text, "sampan_device_inference_count" + labels + "1\",backend=\"twin_test\"}");
  EXPECT_EQ(exec1, 2) << text;
  EXPECT_EQ(exec0, 97) << text;
  EXPECT_EQ(inf0 + inf1, Metric(text, "nv_inference_count{model=\"m\",version=\"1\"}")) << text;
  EXPECT_EQ(exec0 + exec1, Metric(text, "nv_inference_exec_count{model=\"m\",version=\"1\"}")) << text;
  EXPECT_EQ(inf0 + inf1, 99) << text;

  // The repository index keeps the version READY and says which device is out.
  bool listed = false;
  for (const auto& e : core_->RepositoryIndex(false))
    if (e.name == "m" && e.version == "1") {
      listed = true;
      EXPECT_EQ(e.state, ModelState::kReady);
      EXPECT_NE(e.reason.find("serving on 1 of 2 devices"), std::string::npos) << e.reason;
      EXPECT_NE(e.reason.find("backend 'twin_test' device 1: device error"), std::string::npos) << e.reason;
    }
  EXPECT_TRUE(listed);
}

TEST_F(MultiDeviceTest, WithEveryDeviceFailedTheModelIsUnavailableAndNothingHangs) {
  WriteConfig("instance_group [{ kind: KIND_GPU count: 1 }]");
  StartCore();
  {
    std::lock_guard<std::mutex> lock(Twins().mu);
    Twins().fail_at = {2, 4};
    Twins().run_time = std::chrono::microseconds(1000);
  }
  auto answers = InferMany(50);  // every one is answered (a hang would stop the test here)
  int ok = 0;
  for (const auto& r : answers) {
    if (r.ok()) {
      ++ok;
      continue;
    }
    // Failed by its device, or left in the queue when no device remained (the reason travels along).
    EXPECT_NE(r.status().message().find("illegal memory access"), std::string::npos) << r.status().ToString();
  }
  EXPECT_EQ(ok, 1 + 3) << "runs before each device's failing one";
  EXPECT_FALSE(core_->Ready());
  EXPECT_FALSE(*core_->ModelReady("m", ""));
  auto refused = InferMany(1)[0];
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  for (const char* part : {"no healthy device left", "device 0: device error", "device 1: device error"})
    EXPECT_NE(refused.status().message().find(part), std::string::npos) << part << " in " << refused.status().message();
}

}  // namespace
}  // namespace sampan::server
