// server::Core end to end, in process, on small ONNX models written here
// (y = x + bias) and run on the reference backend: loading (good and bad
// models side by side), request validation, dynamic batching with results
// routed to the right request, versions and reload, explicit load/unload,
// plan caching, statistics, metrics and shutdown.
#include "server/core/core.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "builder/backend_builder.h"
#include "runtime/backend.h"
#include "runtime/engine.h"
#include "server/agent/agent_check.h"
#include "server/agent/agent_report.h"
#include "server/test_backends.h"
#include "server/test_models.h"

namespace sampan::server {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class CoreTest : public ::testing::Test {
 protected:
  void SetUp() override { repo_ = FreshTestDirectory("core"); }
  void TearDown() override {
    core_.reset();
    fs::remove_all(repo_);
  }
  void Write(const fs::path& rel, const std::string& bytes) {
    fs::create_directories((repo_ / rel).parent_path());
    std::ofstream(repo_ / rel, std::ios::binary) << bytes;
  }
  void AddVersion(const std::string& model, int version, float bias, std::vector<int64_t> dims = {4},
                  bool batch = true) {
    // Written beside and renamed in, as a deployment tool would (a poller never sees half a file).
    const fs::path dir = repo_ / model / std::to_string(version);
    const fs::path tmp = repo_ / model / (".tmp" + std::to_string(version));
    fs::create_directories(tmp);
    std::ofstream(tmp / "model.onnx", std::ios::binary) << AddModel(dims, batch, bias);
    fs::rename(tmp, dir);
  }
  void Start(CoreOptions::ControlMode mode = CoreOptions::ControlMode::kNone, std::vector<std::string> load = {},
             bool strict = true) {
    CoreOptions o;
    o.repository = repo_.string();
    o.control_mode = mode;
    o.startup_models = std::move(load);
    o.strict_readiness = strict;
    o.default_backend = "reference";
    o.threads_per_instance = 1;
    auto core = Core::Start(o);
    ASSERT_TRUE(core.ok()) << core.status().ToString();
    core_ = std::move(core).value();
  }

  static InferRequest Request(const std::string& model, std::vector<float> values, Shape shape,
                              const std::string& version = "") {
    InferRequest r;
    r.model_name = model;
    r.model_version = version;
    InferTensor t;
    t.name = "x";
    t.dtype = DType::kFloat32;
    t.shape = shape;
    t.data = Tensor::FromVector(DType::kFloat32, values, shape);
    r.inputs.push_back(std::move(t));
    return r;
  }
  Result<InferResponse> InferSync(InferRequest r) {
    std::promise<Result<InferResponse>> p;
    auto f = p.get_future();
    core_->Infer(std::move(r), [&p](Result<InferResponse> res) { p.set_value(std::move(res)); });
    return f.get();
  }
  static std::vector<float> Values(const InferTensor& t) {
    const float* p = t.data.data<float>();
    return std::vector<float>(p, p + t.data.numel());
  }

  fs::path repo_;
  std::unique_ptr<Core> core_;
};

const Status& StatusOf(const Status& s) {
  return s;
}
template <class T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}

#define EXPECT_ERROR(result, code_, text)                                    \
  do {                                                                       \
    auto&& r__ = (result);                                                   \
    const Status& s__ = StatusOf(r__);                                       \
    ASSERT_FALSE(s__.ok());                                                  \
    EXPECT_EQ(s__.code(), (code_)) << s__.ToString();                        \
    EXPECT_NE(s__.message().find(text), std::string::npos) << s__.message(); \
  } while (0)

TEST_F(CoreTest, ServesAModelWithoutConfigAndReportsItsMetadata) {
  AddVersion("add", 1, 1.0f);
  Start();
  EXPECT_TRUE(core_->Live());
  EXPECT_TRUE(core_->Ready());
  auto ready = core_->ModelReady("add", "");
  ASSERT_TRUE(ready.ok());
  EXPECT_TRUE(*ready);
  auto md = core_->GetModelMetadata("add", "");
  ASSERT_TRUE(md.ok()) << md.status().ToString();
  EXPECT_EQ(md->platform, "onnxruntime_onnx");
  EXPECT_EQ(md->versions, std::vector<std::string>{"1"});
  ASSERT_EQ(md->inputs.size(), 1u);
  EXPECT_EQ(md->inputs[0].datatype, "FP32");
  EXPECT_EQ(md->inputs[0].shape, (std::vector<int64_t>{-1, 4}));  // auto-completed: max_batch_size 4
  auto config = core_->GetModelConfig("add", "1");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->max_batch_size(), 4);

  auto r = InferSync(Request("add", {1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model_version, "1");
  ASSERT_EQ(r->outputs.size(), 1u);
  EXPECT_EQ(r->outputs[0].name, "y");
  EXPECT_EQ(r->outputs[0].shape, (Shape{2, 4}));
  EXPECT_EQ(Values(r->outputs[0]), (std::vector<float>{2, 3, 4, 5, 6, 7, 8, 9}));
  // The plan is cached next to the model.
  EXPECT_TRUE(fs::exists(repo_ / "add/1/.sampan/model.reference.plan"));
}

TEST_F(CoreTest, OneBadModelDoesNotStopTheOthers) {
  AddVersion("good", 1, 1.0f);
  AddVersion("garbage", 1, 1.0f);
  Write("garbage/config.pbtxt", "max_batch_size: 4\n}}} not protobuf text {{{\n");
  AddVersion("mismatch", 1, 1.0f);
  Write("mismatch/config.pbtxt", "max_batch_size: 4\ninput [{ name: \"image\" data_type: TYPE_FP32 dims: [4] }]\n");
  fs::create_directories(repo_ / "empty");
  Start();
  EXPECT_TRUE(*core_->ModelReady("good", ""));
  EXPECT_FALSE(core_->Ready());  // strict: not every model is ready
  std::map<std::string, RepositoryEntry> index;
  for (const auto& e : core_->RepositoryIndex(false)) index[e.name] = e;
  EXPECT_EQ(index["good"].state, ModelState::kReady);
  EXPECT_EQ(index["garbage"].state, ModelState::kUnavailable);
  EXPECT_NE(index["garbage"].reason.find("config.pbtxt:2:"), std::string::npos) << index["garbage"].reason;
  EXPECT_NE(index["mismatch"].reason.find("input 'image' is not an input"), std::string::npos)
      << index["mismatch"].reason;
  EXPECT_NE(index["empty"].reason.find("no version directories"), std::string::npos) << index["empty"].reason;
  auto ready_only = core_->RepositoryIndex(true);
  ASSERT_EQ(ready_only.size(), 1u);
  EXPECT_EQ(ready_only[0].name, "good");
  EXPECT_ERROR(InferSync(Request("garbage", {1, 2, 3, 4}, {1, 4})), StatusCode::kUnavailable, "UNAVAILABLE");
  EXPECT_TRUE(InferSync(Request("good", {1, 2, 3, 4}, {1, 4})).ok());
}

TEST_F(CoreTest, NonStrictReadinessIgnoresUnavailableModels) {
  AddVersion("good", 1, 1.0f);
  fs::create_directories(repo_ / "empty");
  Start(CoreOptions::ControlMode::kNone, {}, /*strict=*/false);
  EXPECT_TRUE(core_->Ready());
}

TEST_F(CoreTest, RequestsAreValidatedWithMessagesThatNameTheInput) {
  AddVersion("add", 1, 1.0f);
  Write("add/config.pbtxt", "max_batch_size: 2\n");
  Start();
  EXPECT_ERROR(InferSync(Request("nope", {1}, {1})), StatusCode::kNotFound, "unknown model: 'nope'");
  EXPECT_ERROR(InferSync(Request("add", {1, 2, 3, 4}, {1, 4}, "7")), StatusCode::kNotFound, "version 7");
  EXPECT_ERROR(InferSync(Request("add", {1, 2, 3}, {1, 3})), StatusCode::kInvalidArgument,
               "input 'x' of model 'add' has shape [1,3], expected [-1,4]");
  EXPECT_ERROR(InferSync(Request("add", std::vector<float>(12), {3, 4})), StatusCode::kInvalidArgument,
               "batch size 3, expected 1..2");
  EXPECT_ERROR(InferSync(Request("add", {1, 2, 3, 4}, {4})), StatusCode::kInvalidArgument, "has shape [4]");

  InferRequest wrong_name = Request("add", {1, 2, 3, 4}, {1, 4});
  wrong_name.inputs[0].name = "X";
  EXPECT_ERROR(InferSync(std::move(wrong_name)), StatusCode::kInvalidArgument, "unexpected inference input 'X'");

  InferRequest wrong_type = Request("add", {1, 2, 3, 4}, {1, 4});
  wrong_type.inputs[0].dtype = DType::kFloat64;
  EXPECT_ERROR(InferSync(std::move(wrong_type)), StatusCode::kInvalidArgument, "has datatype FP64, expected FP32");

  InferRequest short_data = Request("add", {1, 2, 3, 4}, {1, 4});
  short_data.inputs[0].data = Tensor::FromVector(DType::kFloat32, std::vector<float>{1, 2, 3}, {3});
  EXPECT_ERROR(InferSync(std::move(short_data)), StatusCode::kInvalidArgument, "got 12 bytes of data");

  InferRequest missing = Request("add", {1, 2, 3, 4}, {1, 4});
  missing.inputs.clear();
  EXPECT_ERROR(InferSync(std::move(missing)), StatusCode::kInvalidArgument, "input 'x' of model 'add' is missing");

  InferRequest twice = Request("add", {1, 2, 3, 4}, {1, 4});
  twice.inputs.push_back(twice.inputs[0]);
  EXPECT_ERROR(InferSync(std::move(twice)), StatusCode::kInvalidArgument, "appears more than once");

  InferRequest bad_output = Request("add", {1, 2, 3, 4}, {1, 4});
  bad_output.outputs = {"z"};
  EXPECT_ERROR(InferSync(std::move(bad_output)), StatusCode::kInvalidArgument, "unexpected inference output 'z'");

  // Failures are counted; the model still serves.
  auto stats = core_->Statistics("add", "1");
  ASSERT_TRUE(stats.ok());
  EXPECT_GE((*stats)[0].inference_stats.fail.count, 8u);
  EXPECT_TRUE(InferSync(Request("add", {1, 2, 3, 4}, {1, 4})).ok());
  EXPECT_NE(core_->RenderMetrics().find("nv_inference_request_failure{model=\"add\",reason=\"OTHER\",version=\"1\"}"),
            std::string::npos);
}

TEST_F(CoreTest, DynamicBatchingRoutesEveryResultToItsRequest) {
  AddVersion("add", 1, 0.5f, {3});
  Write("add/config.pbtxt", R"(max_batch_size: 16
dynamic_batching { max_queue_delay_microseconds: 20000 }
instance_group [{ kind: KIND_CPU count: 2 }]
)");
  Start();
  constexpr int kThreads = 32, kPerThread = 8;
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < kPerThread; ++k) {
        // Each request has its own values and its own batch size (1 or 2 rows).
        const int rows = 1 + (t + k) % 2;
        std::vector<float> in;
        for (int i = 0; i < rows * 3; ++i) in.push_back(static_cast<float>(t * 1000 + k * 10 + i));
        auto r = InferSync(Request("add", in, {rows, 3}));
        if (!r.ok()) {
          failed++;
          ADD_FAILURE() << r.status().ToString();
          continue;
        }
        auto out = Values(r->outputs[0]);
        if (r->outputs[0].shape != Shape{rows, 3} || out.size() != in.size()) {
          wrong++;
          continue;
        }
        for (size_t i = 0; i < in.size(); ++i)
          if (out[i] != in[i] + 0.5f) wrong++;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  auto stats = core_->Statistics("add", "");
  ASSERT_TRUE(stats.ok());
  const ModelStats& s = (*stats)[0];
  EXPECT_EQ(s.inference_stats.success.count, static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_LT(s.execution_count, static_cast<uint64_t>(kThreads * kPerThread));  // requests were batched
  uint64_t rows_seen = 0;
  for (const auto& b : s.batch_stats) {
    EXPECT_LE(b.batch_size, 16u);
    rows_seen += b.batch_size * b.compute_infer.count;
  }
  EXPECT_EQ(rows_seen, s.inference_count);
  // memory_usage: the plan's weights (bias, 3 floats) and the instances' arenas in host memory; a
  // reference engine holds no device memory.
  ASSERT_EQ(s.memory_usage.size(), 1u);
  EXPECT_EQ(s.memory_usage[0].type, "CPU");
  EXPECT_EQ(s.memory_usage[0].id, 0);
  EXPECT_GT(s.memory_usage[0].byte_size, 3 * sizeof(float));
}

TEST_F(CoreTest, VersionPolicyAllServesEachVersion) {
  AddVersion("add", 1, 1.0f);
  AddVersion("add", 2, 2.0f);
  Write("add/config.pbtxt", "max_batch_size: 4\nversion_policy { all {} }\n");
  Start();
  auto md = core_->GetModelMetadata("add", "");
  ASSERT_TRUE(md.ok());
  EXPECT_EQ(md->versions, (std::vector<std::string>{"1", "2"}));
  auto v1 = InferSync(Request("add", {0, 0, 0, 0}, {1, 4}, "1"));
  auto v2 = InferSync(Request("add", {0, 0, 0, 0}, {1, 4}, "2"));
  auto latest = InferSync(Request("add", {0, 0, 0, 0}, {1, 4}));
  ASSERT_TRUE(v1.ok() && v2.ok() && latest.ok());
  EXPECT_EQ(Values(v1->outputs[0])[0], 1.0f);
  EXPECT_EQ(Values(v2->outputs[0])[0], 2.0f);
  EXPECT_EQ(latest->model_version, "2");
}

TEST_F(CoreTest, ExplicitLoadUnloadAndReloadToANewVersion) {
  AddVersion("add", 1, 1.0f);
  AddVersion("other", 1, 5.0f);
  Start(CoreOptions::ControlMode::kExplicit, {"add"});
  EXPECT_TRUE(*core_->ModelReady("add", ""));
  EXPECT_FALSE(*core_->ModelReady("other", ""));
  EXPECT_TRUE(core_->Ready());  // "other" was never asked for

  ASSERT_TRUE(core_->LoadModel("other").ok());
  EXPECT_EQ(Values(InferSync(Request("other", {0, 0, 0, 0}, {1, 4}))->outputs[0])[0], 5.0f);

  // Keep requests flowing while version 2 replaces version 1: none may fail.
  std::atomic<bool> stop{false};
  std::atomic<int> failed{0}, on_v2{0};
  std::thread client([&] {
    while (!stop) {
      auto r = InferSync(Request("add", {0, 0, 0, 0}, {1, 4}));
      if (!r.ok()) {
        failed++;
        ADD_FAILURE() << r.status().ToString();
      } else if (r->model_version == "2") {
        on_v2++;
        EXPECT_EQ(Values(r->outputs[0])[0], 2.0f);
      }
    }
  });
  std::this_thread::sleep_for(50ms);
  AddVersion("add", 2, 2.0f);
  ASSERT_TRUE(core_->LoadModel("add").ok());
  std::this_thread::sleep_for(50ms);
  stop = true;
  client.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GT(on_v2.load(), 0);
  EXPECT_ERROR(InferSync(Request("add", {0, 0, 0, 0}, {1, 4}, "1")), StatusCode::kUnavailable, "unloaded");

  ASSERT_TRUE(core_->UnloadModel("add").ok());
  EXPECT_FALSE(*core_->ModelReady("add", ""));
  EXPECT_ERROR(InferSync(Request("add", {0, 0, 0, 0}, {1, 4})), StatusCode::kUnavailable, "not ready");
  EXPECT_ERROR(core_->LoadModel("absent"), StatusCode::kNotFound, "not in the model repository");
  EXPECT_ERROR(core_->LoadModel("../etc"), StatusCode::kNotFound, "not in the model repository");
}

TEST_F(CoreTest, ModelControlIsRefusedOutsideExplicitMode) {
  AddVersion("add", 1, 1.0f);
  Start(CoreOptions::ControlMode::kNone);
  EXPECT_ERROR(core_->LoadModel("add"), StatusCode::kFailedPrecondition, "--model-control-mode none");
  EXPECT_ERROR(core_->UnloadModel("add"), StatusCode::kFailedPrecondition, "--model-control-mode none");
}

TEST_F(CoreTest, UnknownStartupModelFailsStart) {
  AddVersion("add", 1, 1.0f);
  CoreOptions o;
  o.repository = repo_.string();
  o.control_mode = CoreOptions::ControlMode::kExplicit;
  o.startup_models = {"missing"};
  auto core = Core::Start(o);
  EXPECT_ERROR(core, StatusCode::kNotFound, "--load-model 'missing'");
  o.repository = (repo_ / "nope").string();
  EXPECT_ERROR(Core::Start(o), StatusCode::kNotFound, "is not a directory");
}

TEST_F(CoreTest, MetricsCarryTritonNamesAndLabels) {
  AddVersion("add", 1, 1.0f);
  Start();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(InferSync(Request("add", {1, 2, 3, 4, 5, 6, 7, 8}, {2, 4})).ok());
  const std::string text = core_->RenderMetrics();
  for (const char* line :
       {"nv_inference_request_success{model=\"add\",version=\"1\"} 3\n",
        "nv_inference_count{model=\"add\",version=\"1\"} 6\n",
        "nv_inference_pending_request_count{model=\"add\",version=\"1\"} 0\n",
        "# TYPE nv_inference_request_duration_us counter\n", "# TYPE nv_inference_queue_duration_us counter\n",
        "# TYPE nv_inference_compute_input_duration_us counter\n",
        "# TYPE nv_inference_compute_infer_duration_us counter\n",
        "# TYPE nv_inference_compute_output_duration_us counter\n", "# TYPE sampan_request_latency_seconds histogram\n",
        "sampan_request_latency_seconds_count{model=\"add\",version=\"1\"} 3\n",
        "sampan_request_latency_seconds_bucket{model=\"add\",version=\"1\",le=\"+Inf\"} 3\n"})
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "\nin:\n" << text;
}

TEST_F(CoreTest, ShutdownRefusesNewRequestsAndReadinessGoesFalse) {
  AddVersion("add", 1, 1.0f);
  Start();
  EXPECT_TRUE(core_->Ready());
  EXPECT_TRUE(core_->Shutdown(5s));
  EXPECT_FALSE(core_->Ready());
  EXPECT_TRUE(core_->Live());
  EXPECT_ERROR(InferSync(Request("add", {1, 2, 3, 4}, {1, 4})), StatusCode::kUnavailable, "shutting down");
}

// What haproxy's agent check (agent_check.h) reads: the saturation, readiness and the drain.
TEST_F(CoreTest, AgentCheckReadsTheCore) {
  AddVersion("slow", 1, 1.0f);
  // A lone request waits out the 2 s queue delay: it is in flight meanwhile.
  Write("slow/config.pbtxt", "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 2000000 }\n");
  Start();
  EXPECT_EQ(core_->Saturation(), 0);
  EXPECT_EQ(AgentReply(AgentStateOf(*core_)), "up ready 100%\n");
  std::promise<Result<InferResponse>> answer;
  core_->Infer(Request("slow", {1, 2, 3, 4}, {1, 4}),
               [&answer](Result<InferResponse> r) { answer.set_value(std::move(r)); });
  // Before the first execution a version's capacity is one full batch per instance: 1 / 8.
  EXPECT_DOUBLE_EQ(core_->Saturation(), 1.0 / 8);
  EXPECT_EQ(AgentReply(AgentStateOf(*core_)), "up ready 88%\n");
  EXPECT_FALSE(core_->ShuttingDown());
  EXPECT_FALSE(core_->Shutdown(0ms));  // the request is still queued
  EXPECT_TRUE(core_->ShuttingDown());
  EXPECT_EQ(AgentReply(AgentStateOf(*core_)), "drain\n");
  EXPECT_TRUE(answer.get_future().get().ok());
  EXPECT_TRUE(core_->Shutdown(5s));
  // The in-flight count drops just after the answer is delivered: wait for it (bounded).
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (core_->Saturation() != 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(core_->Saturation(), 0);
  EXPECT_EQ(AgentReply(AgentStateOf(*core_)), "drain\n");
}

TEST_F(CoreTest, AgentCheckSaysDownWhenNotReady) {
  AddVersion("good", 1, 1.0f);
  Write("broken/1/model.onnx", "not an ONNX model");
  Start();
  ASSERT_FALSE(core_->Ready());  // strict readiness: `broken` should serve and does not
  EXPECT_EQ(AgentReply(AgentStateOf(*core_)), "down #not ready\n");
}

TEST_F(CoreTest, AgentReporterWeighsAModelByItsMeasuredRows) {
  AddVersion("add", 1, 1.0f);
  Write("add/config.pbtxt", "max_batch_size: 8\ninstance_group [ { kind: KIND_CPU count: 3 } ]\n");
  Start();
  AgentReporter reporter(*core_, {});
  ModelSnapshot s = reporter.Snapshot("add");
  EXPECT_TRUE(s.found && s.ready);
  EXPECT_EQ(s.rows, 0u);
  EXPECT_EQ(s.instances, 3);
  // Nothing measured yet: no weight, haproxy keeps the one it has.
  EXPECT_EQ(reporter.Reply("model=add"), "up ready\n");
  // Three requests of 2 rows, one at a time: 6 rows.
  for (int i = 0; i < 3; ++i) {
    std::promise<Result<InferResponse>> answer;
    core_->Infer(Request("add", {1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}),
                 [&answer](Result<InferResponse> r) { answer.set_value(std::move(r)); });
    ASSERT_TRUE(answer.get_future().get().ok());
  }
  // The batch statistics are recorded just after the answer is delivered: wait for them (bounded).
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while ((s = reporter.Snapshot("add")).rows != 6 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(s.rows, 6u);
  ASSERT_GT(s.busy_ns, 0u);
  // The weight: 3 instances x rows per busy second, in units of 1e9 rows/s (so it stays in range).
  const double rate = 3 * 6 / (static_cast<double>(s.busy_ns) / 1e9);
  EXPECT_EQ(reporter.Reply("model=add unit=1e9"), StrCat("up ready ", RateWeight(rate, 1e9), "%\n"));
  // The node as a whole (once the last request has left the in-flight count), a model it does
  // not have, a bad line.
  while (core_->Saturation() != 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(reporter.Reply(""), "up ready 100%\n");
  EXPECT_EQ(reporter.Reply("model=nothing"), "down #model nothing is not in the repository\n");
  EXPECT_EQ(reporter.Reply("model=add unit=fast"),
            "up ready 100% #agent-send word 'unit=fast': unit must be a positive number (rows per second per weight "
            "point)\n");
  EXPECT_TRUE(core_->Shutdown(5s));
  EXPECT_EQ(reporter.Reply("model=add"), "drain\n");
}

TEST_F(CoreTest, AgentReporterSaysDownForAModelThatIsNotReady) {
  AddVersion("good", 1, 1.0f);
  Write("broken/1/model.onnx", "not an ONNX model");
  Start(CoreOptions::ControlMode::kNone, {}, /*strict=*/false);
  ASSERT_TRUE(core_->Ready());
  AgentReporter reporter(*core_, {});
  EXPECT_EQ(reporter.Reply("model=broken"), "down #model broken not ready\n");
  EXPECT_EQ(reporter.Reply("model=good"), "up ready\n");
}

TEST_F(CoreTest, KServeDatatypeNames) {
  EXPECT_EQ(DTypeFromKServe("FP32"), DType::kFloat32);
  EXPECT_EQ(DTypeFromKServe("BF16"), DType::kBFloat16);
  EXPECT_EQ(DTypeFromKServe("BOOL"), DType::kBool);
  EXPECT_EQ(DTypeFromKServe("BYTES"), DType::kString);
  EXPECT_EQ(DTypeFromKServe("fp32"), DType::kUndefined);
  EXPECT_STREQ(KServeDatatype(DType::kInt64), "INT64");
  EXPECT_STREQ(KServeDatatype(DType::kString), "BYTES");
  EXPECT_STREQ(KServeDatatype(DType::kComplex64), "");
  EXPECT_STREQ(ModelStateName(ModelState::kReady), "READY");
  EXPECT_STREQ(ModelStateName(ModelState::kUnavailable), "UNAVAILABLE");
}

}  // namespace
}  // namespace sampan::server

namespace sampan::server {
namespace {

// A backend for tests: the reference backend whose health a test can break,
// as a sticky device error would (cuda backend).
std::atomic<bool> g_faulty_healthy{true};

class FaultyEngine : public runtime::BackendEngine {
 public:
  explicit FaultyEngine(std::unique_ptr<runtime::BackendEngine> inner) : inner_(std::move(inner)) {}
  Result<std::unique_ptr<runtime::ContextImpl>> CreateContext() override { return inner_->CreateContext(); }
  Status Health() const override {
    return g_faulty_healthy ? Status::Ok() : Internal("device error: an illegal memory access was encountered (test)");
  }

 private:
  std::unique_ptr<runtime::BackendEngine> inner_;
};

SAMPAN_REGISTER_TEST_BACKEND(faulty_test, FaultyEngine)

TEST_F(CoreTest, StickyDeviceErrorMakesModelAndServerNotReady) {
  g_faulty_healthy = true;
  AddVersion("sick", 1, 1.0f);
  AddVersion("well", 1, 2.0f);
  Write("sick/config.pbtxt", "max_batch_size: 4\nsampan { backend: \"faulty_test\" }\n");
  Start();
  ASSERT_TRUE(core_->Ready());
  ASSERT_TRUE(InferSync(Request("sick", {1, 2, 3, 4}, {1, 4})).ok());
  g_faulty_healthy = false;  // the engine hits a sticky error
  EXPECT_FALSE(core_->Ready());
  EXPECT_FALSE(*core_->ModelReady("sick", ""));
  EXPECT_TRUE(*core_->ModelReady("well", ""));
  EXPECT_ERROR(InferSync(Request("sick", {1, 2, 3, 4}, {1, 4})), StatusCode::kUnavailable, "illegal memory access");
  EXPECT_TRUE(InferSync(Request("well", {1, 2, 3, 4}, {1, 4})).ok());  // the other model keeps serving
  bool listed = false;
  for (const auto& e : core_->RepositoryIndex(false))
    if (e.name == "sick") listed = e.reason.find("illegal memory access") != std::string::npos;
  EXPECT_TRUE(listed) << "the repository index gives the reason";
  g_faulty_healthy = true;
}

TEST_F(CoreTest, PreserveOrderingAnswersInRequestOrder) {
  AddVersion("add", 1, 0.0f, {64});
  Write("add/config.pbtxt", R"(max_batch_size: 8
dynamic_batching { preserve_ordering: true }
instance_group [{ kind: KIND_CPU count: 4 }]
)");
  Start();
  constexpr int kRequests = 300;
  std::mutex mu;
  std::vector<int> order;
  std::atomic<int> answered{0}, wrong{0};
  for (int i = 0; i < kRequests; ++i) {
    // Sizes vary (1..8 rows), so instances finish out of order unless the server holds answers back.
    const int rows = 1 + (i * 5) % 8;
    InferRequest r =
        Request("add", std::vector<float>(static_cast<size_t>(rows) * 64, static_cast<float>(i)), {rows, 64});
    core_->Infer(std::move(r), [&, i](Result<InferResponse> res) {
      if (!res.ok() || res->outputs[0].data.data<float>()[0] != static_cast<float>(i)) wrong++;
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
      answered++;
    });
  }
  for (int spin = 0; answered < kRequests && spin < 2000; ++spin) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(answered.load(), kRequests);
  EXPECT_EQ(wrong.load(), 0);
  for (int i = 0; i < kRequests; ++i) ASSERT_EQ(order[static_cast<size_t>(i)], i) << "answer " << i << " out of order";
}

}  // namespace
}  // namespace sampan::server
