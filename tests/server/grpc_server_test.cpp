// The gRPC front end over a real channel (loopback TCP) against a Core test
// double: every RPC, raw and typed tensors, parameters, error codes,
// cancellation and deadlines, streaming with many requests in flight, model
// control permissions, the message size limit, the system shared-memory
// extension and the grpc.health.v1 health service.
#include "server/grpc/grpc_server.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "grpc_service.grpc.pb.h"
#include "server/grpc_fake_core.h"

namespace sampan::server {
namespace {

using inference::GRPCInferenceService;
using testing::FakeCore;

::testing::AssertionResult Contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\n  message: " << text << "\n  lacks:   " << part;
}
#define EXPECT_CONTAINS(text, part) EXPECT_TRUE(Contains((text), (part)))

class GrpcServerTest : public ::testing::Test {
 protected:
  void StartServer(GrpcOptions options = {}) {
    options.address = "127.0.0.1";
    options.port = 0;
    auto server = GrpcServer::Start(&core_, options);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    ASSERT_GT(server_->port(), 0);
    ::grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    channel_ = ::grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(server_->port()),
                                           ::grpc::InsecureChannelCredentials(), args);
    stub_ = GRPCInferenceService::NewStub(channel_);
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  // A "double" request with FP32 x = values, shape [1, n], as raw contents.
  static inference::ModelInferRequest DoubleRequest(const std::vector<float>& values, const std::string& id = "") {
    inference::ModelInferRequest req;
    req.set_model_name("double");
    req.set_id(id);
    auto* in = req.add_inputs();
    in->set_name("x");
    in->set_datatype("FP32");
    in->add_shape(1);
    in->add_shape(static_cast<int64_t>(values.size()));
    req.add_raw_input_contents(
        std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    return req;
  }
  static std::vector<float> FloatOutput(const inference::ModelInferResponse& resp, int i) {
    const std::string& raw = resp.raw_output_contents(i);
    std::vector<float> v(raw.size() / sizeof(float));
    std::memcpy(v.data(), raw.data(), raw.size());
    return v;
  }
  ::grpc::Status Infer(const inference::ModelInferRequest& req, inference::ModelInferResponse* resp) {
    ::grpc::ClientContext ctx;
    return stub_->ModelInfer(&ctx, req, resp);
  }

  FakeCore core_;
  std::unique_ptr<GrpcServer> server_;
  std::shared_ptr<::grpc::Channel> channel_;
  std::unique_ptr<GRPCInferenceService::Stub> stub_;
};

TEST_F(GrpcServerTest, HealthMetadataConfigStatsIndex) {
  StartServer();
  {
    ::grpc::ClientContext ctx;
    inference::ServerLiveResponse r;
    ASSERT_TRUE(stub_->ServerLive(&ctx, {}, &r).ok());
    EXPECT_TRUE(r.live());
  }
  core_.ready = false;
  {
    ::grpc::ClientContext ctx;
    inference::ServerReadyResponse r;
    ASSERT_TRUE(stub_->ServerReady(&ctx, {}, &r).ok());
    EXPECT_FALSE(r.ready());
  }
  {
    ::grpc::ClientContext ctx;
    inference::ModelReadyRequest q;
    q.set_name("double");
    inference::ModelReadyResponse r;
    ASSERT_TRUE(stub_->ModelReady(&ctx, q, &r).ok());
    EXPECT_TRUE(r.ready());
  }
  {
    ::grpc::ClientContext ctx;
    inference::ModelReadyRequest q;
    q.set_name("nope");
    inference::ModelReadyResponse r;
    r.set_ready(true);
    // As Triton answers: an unknown model is not ready, which is no error.
    ASSERT_TRUE(stub_->ModelReady(&ctx, q, &r).ok());
    EXPECT_FALSE(r.ready());
  }
  {
    ::grpc::ClientContext ctx;
    inference::ServerMetadataResponse r;
    ASSERT_TRUE(stub_->ServerMetadata(&ctx, {}, &r).ok());
    EXPECT_EQ(r.name(), "sampan");
    EXPECT_EQ(r.version(), "9.9.9");
    ASSERT_EQ(r.extensions_size(), 2);
    EXPECT_EQ(r.extensions(0), "model_repository");
  }
  {
    ::grpc::ClientContext ctx;
    inference::ModelMetadataRequest q;
    q.set_name("double");
    inference::ModelMetadataResponse r;
    ASSERT_TRUE(stub_->ModelMetadata(&ctx, q, &r).ok());
    EXPECT_EQ(r.platform(), "onnxruntime_onnx");
    ASSERT_EQ(r.inputs_size(), 1);
    EXPECT_EQ(r.inputs(0).datatype(), "FP32");
    EXPECT_EQ(r.inputs(0).shape(0), -1);
    ASSERT_EQ(r.outputs_size(), 2);
    EXPECT_EQ(r.outputs(1).name(), "n");
  }
  {
    ::grpc::ClientContext ctx;
    inference::ModelConfigRequest q;
    q.set_name("double");
    inference::ModelConfigResponse r;
    ASSERT_TRUE(stub_->ModelConfig(&ctx, q, &r).ok());
    EXPECT_EQ(r.config().max_batch_size(), 8);
    EXPECT_EQ(r.config().input(0).data_type(), serverconfig::TYPE_FP32);
    EXPECT_EQ(r.config().dynamic_batching().preferred_batch_size(0), 4);
    EXPECT_EQ(r.config().sampan().precision(), "fp16");
  }
  {
    ::grpc::ClientContext ctx;
    inference::ModelStatisticsRequest q;
    inference::ModelStatisticsResponse r;
    ASSERT_TRUE(stub_->ModelStatistics(&ctx, q, &r).ok());
    ASSERT_EQ(r.model_stats_size(), 1);
    const auto& s = r.model_stats(0);
    EXPECT_EQ(s.inference_count(), 10u);
    EXPECT_EQ(s.execution_count(), 3u);
    EXPECT_EQ(s.last_inference(), 1234u);
    EXPECT_EQ(s.inference_stats().success().ns(), 5000u);
    EXPECT_EQ(s.inference_stats().queue().count(), 10u);
    ASSERT_EQ(s.batch_stats_size(), 1);
    EXPECT_EQ(s.batch_stats(0).compute_output().ns(), 300u);
    ASSERT_EQ(s.memory_usage_size(), 1);
    EXPECT_EQ(s.memory_usage(0).type(), "GPU");
    EXPECT_EQ(s.memory_usage(0).id(), 2);
    EXPECT_EQ(s.memory_usage(0).byte_size(), 1u << 20);
  }
  {
    ::grpc::ClientContext ctx;
    inference::ModelStatisticsRequest q;
    q.set_name("nope");
    inference::ModelStatisticsResponse r;
    EXPECT_EQ(stub_->ModelStatistics(&ctx, q, &r).error_code(), ::grpc::StatusCode::NOT_FOUND);
  }
  {
    ::grpc::ClientContext ctx;
    inference::RepositoryIndexResponse r;
    ASSERT_TRUE(stub_->RepositoryIndex(&ctx, {}, &r).ok());
    ASSERT_EQ(r.models_size(), 2);
    EXPECT_EQ(r.models(0).state(), "READY");
    EXPECT_EQ(r.models(1).state(), "UNAVAILABLE");
    EXPECT_CONTAINS(r.models(1).reason(), "config.pbtxt");
  }
}

TEST_F(GrpcServerTest, InferRawInputsAreWrappedNotCopied) {
  StartServer();
  inference::ModelInferRequest req = DoubleRequest({1, 2, 3, 4}, "req-7");
  (*req.mutable_parameters())["priority"].set_uint64_param(2);
  (*req.mutable_parameters())["timeout"].set_int64_param(5000);
  (*req.mutable_parameters())["custom"].set_bool_param(true);
  inference::ModelInferResponse resp;
  ::grpc::Status s = Infer(req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.id(), "req-7");
  EXPECT_EQ(resp.model_name(), "double");
  EXPECT_EQ(resp.model_version(), "1");
  EXPECT_EQ(resp.parameters().at("fake").string_param(), "yes");
  ASSERT_EQ(resp.outputs_size(), 2);
  ASSERT_EQ(resp.raw_output_contents_size(), 2);
  EXPECT_EQ(resp.outputs(0).name(), "y");
  EXPECT_EQ(resp.outputs(0).datatype(), "FP32");
  EXPECT_EQ(std::vector<int64_t>(resp.outputs(0).shape().begin(), resp.outputs(0).shape().end()),
            (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(FloatOutput(resp, 0), (std::vector<float>{2, 4, 6, 8}));
  EXPECT_EQ(resp.outputs(1).datatype(), "INT64");
  int64_t n = 0;
  std::memcpy(&n, resp.raw_output_contents(1).data(), sizeof n);
  EXPECT_EQ(n, 4);

  std::lock_guard<std::mutex> lock(core_.mu_);
  EXPECT_EQ(core_.last_priority, 2u);
  EXPECT_EQ(core_.last_timeout_us, 5000u);
  EXPECT_EQ(core_.last_parameters.at("custom"), "true");
  // The input tensor points into the request message that the keepalive holds.
  auto msg = std::static_pointer_cast<inference::ModelInferRequest>(core_.last_keepalive);
  ASSERT_NE(msg, nullptr);
  EXPECT_EQ(core_.last_input_data, msg->raw_input_contents(0).data());
}

TEST_F(GrpcServerTest, InferTypedContentsAndRequestedOutputs) {
  StartServer();
  inference::ModelInferRequest req;
  req.set_model_name("double");
  auto* in = req.add_inputs();
  in->set_name("x");
  in->set_datatype("INT64");
  in->add_shape(3);
  for (int64_t v : {5, -6, 7}) in->mutable_contents()->add_int64_contents(v);
  req.add_outputs()->set_name("y");
  inference::ModelInferResponse resp;
  ::grpc::Status s = Infer(req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.outputs_size(), 1);
  EXPECT_EQ(resp.outputs(0).name(), "y");
  std::vector<int64_t> y(3);
  ASSERT_EQ(resp.raw_output_contents(0).size(), 3 * sizeof(int64_t));
  std::memcpy(y.data(), resp.raw_output_contents(0).data(), 3 * sizeof(int64_t));
  EXPECT_EQ(y, (std::vector<int64_t>{10, -12, 14}));

  // FP32 typed contents too.
  inference::ModelInferRequest f;
  f.set_model_name("double");
  auto* fin = f.add_inputs();
  fin->set_name("x");
  fin->set_datatype("FP32");
  fin->add_shape(2);
  fin->mutable_contents()->add_fp32_contents(0.5f);
  fin->mutable_contents()->add_fp32_contents(-1.5f);
  ASSERT_TRUE(Infer(f, &resp).ok());
  EXPECT_EQ(FloatOutput(resp, 0), (std::vector<float>{1.0f, -3.0f}));
}

TEST_F(GrpcServerTest, BadRequestsGetTheRightCodeAndTheServerKeepsServing) {
  StartServer();
  struct Case {
    std::string what;
    std::function<void(inference::ModelInferRequest*)> mutate;
    ::grpc::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"raw size", [](auto* r) { r->mutable_raw_input_contents(0)->resize(7); }, ::grpc::StatusCode::INVALID_ARGUMENT,
       "input 'x': raw_input_contents[0] holds 7 bytes, but FP32 [1,4] needs 16"},
      {"raw count", [](auto* r) { r->add_raw_input_contents("x"); }, ::grpc::StatusCode::INVALID_ARGUMENT,
       "1 inputs but 2 raw_input_contents"},
      {"datatype", [](auto* r) { r->mutable_inputs(0)->set_datatype("FLOAT"); }, ::grpc::StatusCode::INVALID_ARGUMENT,
       "unknown datatype 'FLOAT'"},
      // FP32 bytes read as BYTES: the first 4-byte "length" runs past the end.
      {"bytes", [](auto* r) { r->mutable_inputs(0)->set_datatype("BYTES"); }, ::grpc::StatusCode::INVALID_ARGUMENT,
       "BYTES element 0 says"},
      {"negative dim", [](auto* r) { r->mutable_inputs(0)->set_shape(0, -1); }, ::grpc::StatusCode::INVALID_ARGUMENT,
       "negative dimension"},
      {"wrong dtype for model", [](auto* r) { r->mutable_inputs(0)->set_datatype("INT32"); },
       ::grpc::StatusCode::INVALID_ARGUMENT, "expected FP32 or INT64, got INT32"},
      {"unknown model", [](auto* r) { r->set_model_name("nope"); }, ::grpc::StatusCode::NOT_FOUND,
       "unknown model 'nope'"},
      {"no model", [](auto* r) { r->clear_model_name(); }, ::grpc::StatusCode::INVALID_ARGUMENT, "model_name is empty"},
      {"busy", [](auto* r) { r->set_model_name("busy"); }, ::grpc::StatusCode::UNAVAILABLE, "queue is full"},
      {"priority type", [](auto* r) { (*r->mutable_parameters())["priority"].set_string_param("high"); },
       ::grpc::StatusCode::INVALID_ARGUMENT, "'priority' must be a non-negative integer"},
      {"negative timeout", [](auto* r) { (*r->mutable_parameters())["timeout"].set_int64_param(-5); },
       ::grpc::StatusCode::INVALID_ARGUMENT, "got -5"},
      {"sequence id of a bool", [](auto* r) { (*r->mutable_parameters())["sequence_id"].set_bool_param(true); },
       ::grpc::StatusCode::INVALID_ARGUMENT, "'sequence_id' must be an integer or a string"},
      {"negative sequence id", [](auto* r) { (*r->mutable_parameters())["sequence_id"].set_int64_param(-3); },
       ::grpc::StatusCode::INVALID_ARGUMENT, "is negative"},
      {"sequence start of a number", [](auto* r) { (*r->mutable_parameters())["sequence_start"].set_int64_param(1); },
       ::grpc::StatusCode::INVALID_ARGUMENT, "'sequence_start' must be a bool"},
      {"both raw and contents", [](auto* r) { r->mutable_inputs(0)->mutable_contents()->add_fp32_contents(1); },
       ::grpc::StatusCode::INVALID_ARGUMENT, "use one or the other"},
      {"classification",
       [](auto* r) {
         auto* o = r->add_outputs();
         o->set_name("y");
         (*o->mutable_parameters())["classification"].set_int64_param(3);
       },
       ::grpc::StatusCode::UNIMPLEMENTED, "classification"},
      {"typed count",
       [](auto* r) {
         r->clear_raw_input_contents();
         r->mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
       },
       ::grpc::StatusCode::INVALID_ARGUMENT, "contents.fp32_contents holds 1 values, but shape [1,4] needs 4"},
      {"typed field",
       [](auto* r) {
         r->clear_raw_input_contents();
         for (int i = 0; i < 4; ++i) r->mutable_inputs(0)->mutable_contents()->add_int_contents(1);
       },
       ::grpc::StatusCode::INVALID_ARGUMENT,
       "values go in contents.fp32_contents, but the request uses contents.int_contents"},
      {"fp16 typed",
       [](auto* r) {
         r->clear_raw_input_contents();
         r->mutable_inputs(0)->set_datatype("FP16");
       },
       ::grpc::StatusCode::INVALID_ARGUMENT, "send it in raw_input_contents"},
      {"int8 range",
       [](auto* r) {
         r->clear_raw_input_contents();
         r->mutable_inputs(0)->set_datatype("INT8");
         for (int v : {1, 2, 300, 4}) r->mutable_inputs(0)->mutable_contents()->add_int_contents(v);
       },
       ::grpc::StatusCode::INVALID_ARGUMENT, "contents[2] = 300 does not fit INT8"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    inference::ModelInferRequest req = DoubleRequest({1, 2, 3, 4});
    c.mutate(&req);
    inference::ModelInferResponse resp;
    ::grpc::Status s = Infer(req, &resp);
    EXPECT_EQ(s.error_code(), c.code) << s.error_message();
    EXPECT_CONTAINS(s.error_message(), c.message);
  }
  inference::ModelInferResponse resp;
  ASSERT_TRUE(Infer(DoubleRequest({1, 1, 1, 1}), &resp).ok());
  EXPECT_EQ(FloatOutput(resp, 0), (std::vector<float>{2, 2, 2, 2}));
}

TEST_F(GrpcServerTest, DeadlineAndCancelReachCore) {
  StartServer();
  {
    ::grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    inference::ModelInferRequest req = DoubleRequest({1});
    req.set_model_name("slow");
    inference::ModelInferResponse resp;
    ::grpc::Status s = stub_->ModelInfer(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), ::grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  {
    ::grpc::ClientContext ctx;
    inference::ModelInferRequest req = DoubleRequest({1});
    req.set_model_name("slow");
    inference::ModelInferResponse resp;
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ctx.TryCancel();
    });
    ::grpc::Status s = stub_->ModelInfer(&ctx, req, &resp);
    canceller.join();
    EXPECT_EQ(s.error_code(), ::grpc::StatusCode::CANCELLED);
  }
  // Both requests' cancelled flags were set: Core saw them and let go.
  for (int i = 0; i < 2000 && core_.cancels_seen.load() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(core_.cancels_seen.load(), 2);
  inference::ModelInferResponse resp;
  EXPECT_TRUE(Infer(DoubleRequest({1}), &resp).ok());
}

TEST_F(GrpcServerTest, StreamManyRequestsAllMatchedById) {
  StartServer();
  ::grpc::ClientContext ctx;
  auto stream = stub_->ModelStreamInfer(&ctx);
  constexpr int kRequests = 300;
  // Every 37th request (from the 5th) is bad (wrong datatype): its error comes back on the
  // stream, carrying the id, and the stream goes on.
  auto bad = [](int i) { return i % 37 == 5; };
  std::thread writer([&] {
    for (int i = 0; i < kRequests; ++i) {
      inference::ModelInferRequest req = DoubleRequest({float(i), float(-i), 0.5f}, "id-" + std::to_string(i));
      if (bad(i)) req.mutable_inputs(0)->set_datatype("INT32");
      if (i % 10 == 0) (*req.mutable_parameters())["triton_enable_empty_final_response"].set_bool_param(true);
      ASSERT_TRUE(stream->Write(req));
    }
    stream->WritesDone();
  });
  std::map<std::string, inference::ModelStreamInferResponse> got;
  std::vector<std::string> order;
  inference::ModelStreamInferResponse r;
  while (stream->Read(&r)) {
    order.push_back(r.infer_response().id());
    EXPECT_TRUE(got.emplace(r.infer_response().id(), r).second) << "duplicate " << r.infer_response().id();
  }
  writer.join();
  ::grpc::Status s = stream->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(got.size(), size_t{kRequests});
  int errors = 0;
  for (int i = 0; i < kRequests; ++i) {
    const std::string id = "id-" + std::to_string(i);
    ASSERT_TRUE(got.count(id)) << id;
    const auto& resp = got[id];
    // Asked for (decoupled-model clients do), the one response is marked final.
    const auto& params = resp.infer_response().parameters();
    EXPECT_EQ(params.count("triton_final_response") && params.at("triton_final_response").bool_param(), i % 10 == 0)
        << id;
    if (bad(i)) {
      ++errors;
      EXPECT_CONTAINS(resp.error_message(), "expected FP32 or INT64, got INT32");
      continue;
    }
    ASSERT_EQ(resp.error_message(), "") << id;
    EXPECT_EQ(FloatOutput(resp.infer_response(), 0), (std::vector<float>{2.0f * i, -2.0f * i, 1.0f})) << id;
  }
  EXPECT_EQ(errors, 8);  // i = 5, 42, ..., 264
  std::vector<std::string> sorted_by_request(order);
  std::sort(sorted_by_request.begin(), sorted_by_request.end(),
            [](const std::string& a, const std::string& b) { return std::stoi(a.substr(3)) < std::stoi(b.substr(3)); });
  // Completion order, not request order (Core's double finishes after a random delay).
  EXPECT_NE(order, sorted_by_request);
}

TEST_F(GrpcServerTest, StreamCancelMarksQueuedRequestsCancelled) {
  StartServer();
  ::grpc::ClientContext ctx;
  auto stream = stub_->ModelStreamInfer(&ctx);
  for (int i = 0; i < 3; ++i) {
    inference::ModelInferRequest req = DoubleRequest({1}, std::to_string(i));
    req.set_model_name("slow");
    ASSERT_TRUE(stream->Write(req));
  }
  // A quick request on the same stream still completes while the slow ones wait.
  ASSERT_TRUE(stream->Write(DoubleRequest({3}, "quick")));
  inference::ModelStreamInferResponse r;
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.infer_response().id(), "quick");
  ctx.TryCancel();
  while (stream->Read(&r)) {
  }
  EXPECT_EQ(stream->Finish().error_code(), ::grpc::StatusCode::CANCELLED);
  for (int i = 0; i < 2000 && core_.cancels_seen.load() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(core_.cancels_seen.load(), 3);
}

TEST_F(GrpcServerTest, StopEndsIdleStreamsAtOnce) {
  StartServer();
  ::grpc::ClientContext ctx;
  auto stream = stub_->ModelStreamInfer(&ctx);
  ASSERT_TRUE(stream->Write(DoubleRequest({1}, "before-stop")));
  inference::ModelStreamInferResponse r;
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.infer_response().id(), "before-stop");
  // The client keeps the stream open; Stop does not wait for gRPC's deadline.
  const auto start = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  while (stream->Read(&r)) {
  }
  ::grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::UNAVAILABLE);
  EXPECT_CONTAINS(s.error_message(), "shutting down");
}

TEST_F(GrpcServerTest, ModelControlNeedsTheBearerToken) {
  GrpcOptions options;
  options.model_control_token = "s3cret";
  StartServer(options);
  auto load = [&](const std::string& name, const std::string& auth) {
    ::grpc::ClientContext ctx;
    if (!auth.empty()) ctx.AddMetadata("authorization", auth);
    inference::RepositoryModelLoadRequest q;
    q.set_model_name(name);
    inference::RepositoryModelLoadResponse r;
    return stub_->RepositoryModelLoad(&ctx, q, &r);
  };
  ::grpc::Status s = load("double", "");
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_CONTAINS(s.error_message(), "none was sent");
  s = load("double", "Bearer s3cre");
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_CONTAINS(s.error_message(), "does not match");
  EXPECT_EQ(load("double", "Basic s3cret").error_code(), ::grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(load("double", "Bearer s3cret").ok());
  s = load("broken", "bearer s3cret");
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_CONTAINS(s.error_message(), "config.pbtxt:1:1");
  {
    ::grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer s3cret");
    inference::RepositoryModelLoadRequest q;
    q.set_model_name("double");
    (*q.mutable_parameters())["file:1/model.onnx"].set_bytes_param("onnx");
    inference::RepositoryModelLoadResponse r;
    s = stub_->RepositoryModelLoad(&ctx, q, &r);
    EXPECT_EQ(s.error_code(), ::grpc::StatusCode::UNIMPLEMENTED);
    EXPECT_CONTAINS(s.error_message(), "load parameter 'file:1/model.onnx'");
  }
  auto unload = [&](const std::string& name, const std::string& auth) {
    ::grpc::ClientContext ctx;
    if (!auth.empty()) ctx.AddMetadata("authorization", auth);
    inference::RepositoryModelUnloadRequest q;
    q.set_model_name(name);
    (*q.mutable_parameters())["unload_dependents"].set_bool_param(true);
    inference::RepositoryModelUnloadResponse r;
    return stub_->RepositoryModelUnload(&ctx, q, &r);
  };
  EXPECT_EQ(unload("double", "").error_code(), ::grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(unload("double", "Bearer s3cret").ok());
  EXPECT_EQ(unload("nope", "Bearer s3cret").error_code(), ::grpc::StatusCode::NOT_FOUND);
  std::lock_guard<std::mutex> lock(core_.mu_);
  EXPECT_EQ(core_.loads, (std::vector<std::string>{"double", "broken"}));
  EXPECT_EQ(core_.unloads, (std::vector<std::string>{"double", "nope"}));
}

TEST_F(GrpcServerTest, MessageSizeLimitAndBusyPort) {
  GrpcOptions options;
  options.max_message_bytes = 4096;
  StartServer(options);
  inference::ModelInferResponse resp;
  ::grpc::Status s = Infer(DoubleRequest(std::vector<float>(2048, 1.0f)), &resp);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_TRUE(Infer(DoubleRequest({1, 2}), &resp).ok());

  GrpcOptions same;
  same.address = "127.0.0.1";
  same.port = server_->port();
  auto second = GrpcServer::Start(&core_, same);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kIoError);
  EXPECT_CONTAINS(second.status().message(), "cannot listen on 127.0.0.1:" + std::to_string(server_->port()));
}

TEST_F(GrpcServerTest, SharedMemoryRegionsServeInputsAndOutputs) {
  GrpcOptions options;
  options.enable_shared_memory = true;
  options.model_control_token = "s3cret";
  StartServer(options);
  testing::ShmObject obj("server", 64);
  ASSERT_NE(obj.base(), nullptr);
  const float x[4] = {1, -2, 3.5f, 0};
  std::memcpy(obj.base(), x, sizeof(x));

  auto register_region = [&](const std::string& name, uint64_t offset, uint64_t size, const char* token) {
    ::grpc::ClientContext ctx;
    if (token) ctx.AddMetadata("authorization", token);
    inference::SystemSharedMemoryRegisterRequest req;
    req.set_name(name);
    req.set_key(obj.key());
    req.set_offset(offset);
    req.set_byte_size(size);
    inference::SystemSharedMemoryRegisterResponse resp;
    return stub_->SystemSharedMemoryRegister(&ctx, req, &resp);
  };
  ::grpc::Status s = register_region("in", 0, 16, nullptr);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_CONTAINS(s.error_message(), "system shared memory register requires 'authorization: Bearer <token>'");
  ASSERT_TRUE(register_region("in", 0, 16, "Bearer s3cret").ok());
  ASSERT_TRUE(register_region("out", 16, 48, "Bearer s3cret").ok());
  s = register_region("in", 0, 16, "Bearer s3cret");
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_CONTAINS(s.error_message(), "'in' is already registered");

  {
    ::grpc::ClientContext ctx;
    inference::SystemSharedMemoryStatusRequest req;
    inference::SystemSharedMemoryStatusResponse resp;
    ASSERT_TRUE(stub_->SystemSharedMemoryStatus(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.regions_size(), 2);
    const auto& out = resp.regions().at("out");
    EXPECT_EQ(out.name(), "out");
    EXPECT_EQ(out.key(), obj.key());
    EXPECT_EQ(out.offset(), 16u);
    EXPECT_EQ(out.byte_size(), 48u);
  }
  {
    ::grpc::ClientContext ctx;
    inference::SystemSharedMemoryStatusRequest req;
    req.set_name("nope");
    inference::SystemSharedMemoryStatusResponse resp;
    s = stub_->SystemSharedMemoryStatus(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), ::grpc::StatusCode::NOT_FOUND);
    EXPECT_CONTAINS(s.error_message(), "'nope'");
  }
  {
    ::grpc::ClientContext ctx;
    inference::ServerMetadataResponse md;
    ASSERT_TRUE(stub_->ServerMetadata(&ctx, {}, &md).ok());
    EXPECT_NE(std::find(md.extensions().begin(), md.extensions().end(), "system_shared_memory"), md.extensions().end());
  }

  // x from region "in"; y into region "out" at offset 8 (byte 24 of the object); n in the message.
  inference::ModelInferRequest req;
  req.set_model_name("double");
  auto* in = req.add_inputs();
  in->set_name("x");
  in->set_datatype("FP32");
  in->add_shape(1);
  in->add_shape(4);
  (*in->mutable_parameters())["shared_memory_region"].set_string_param("in");
  (*in->mutable_parameters())["shared_memory_byte_size"].set_uint64_param(16);
  auto* y = req.add_outputs();
  y->set_name("y");
  (*y->mutable_parameters())["shared_memory_region"].set_string_param("out");
  (*y->mutable_parameters())["shared_memory_byte_size"].set_int64_param(40);
  (*y->mutable_parameters())["shared_memory_offset"].set_int64_param(8);
  req.add_outputs()->set_name("n");
  inference::ModelInferResponse resp;
  s = Infer(req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.raw_output_contents_size(), 2);
  EXPECT_EQ(resp.raw_output_contents(0), "");
  EXPECT_EQ(resp.raw_output_contents(1).size(), 8u);
  EXPECT_EQ(resp.outputs(0).parameters().at("shared_memory_region").string_param(), "out");
  EXPECT_EQ(resp.outputs(0).parameters().at("shared_memory_byte_size").int64_param(), 16);
  float got[4];
  std::memcpy(got, obj.base() + 24, sizeof(got));
  EXPECT_EQ(std::vector<float>(got, got + 4), (std::vector<float>{2, -4, 7, 0}));

  // The same over the stream; a bad one (output too small) is an error response, the stream goes on.
  {
    std::memset(obj.base() + 16, 0, 48);
    ::grpc::ClientContext ctx;
    auto stream = stub_->ModelStreamInfer(&ctx);
    req.set_id("good");
    ASSERT_TRUE(stream->Write(req));
    inference::ModelInferRequest small = req;
    small.set_id("small");
    (*small.mutable_outputs(0)->mutable_parameters())["shared_memory_byte_size"].set_int64_param(12);
    ASSERT_TRUE(stream->Write(small));
    stream->WritesDone();
    std::map<std::string, inference::ModelStreamInferResponse> by_id;
    inference::ModelStreamInferResponse r;
    while (stream->Read(&r)) by_id[r.infer_response().id()] = r;
    EXPECT_TRUE(stream->Finish().ok());
    ASSERT_EQ(by_id.size(), 2u);
    EXPECT_EQ(by_id["good"].error_message(), "");
    EXPECT_EQ(by_id["small"].error_message(),
              "output 'y' has 16 bytes, more than the 12 bytes given in shared-memory region 'out'");
    std::memcpy(got, obj.base() + 24, sizeof(got));
    EXPECT_EQ(got[2], 7.0f);
  }

  {
    ::grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer s3cret");
    inference::SystemSharedMemoryUnregisterRequest unreg;  // empty name: every region
    inference::SystemSharedMemoryUnregisterResponse unreg_resp;
    ASSERT_TRUE(stub_->SystemSharedMemoryUnregister(&ctx, unreg, &unreg_resp).ok());
  }
  s = Infer(req, &resp);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_CONTAINS(s.error_message(), "input 'x': Unable to find shared memory region: 'in'");
}

TEST_F(GrpcServerTest, SharedMemoryIsOffByDefault) {
  StartServer();
  const std::string hint = "start sampan serve with --enable-shared-memory";
  {
    ::grpc::ClientContext ctx;
    inference::SystemSharedMemoryStatusResponse resp;
    ::grpc::Status s = stub_->SystemSharedMemoryStatus(&ctx, {}, &resp);
    EXPECT_EQ(s.error_code(), ::grpc::StatusCode::UNIMPLEMENTED);
    EXPECT_CONTAINS(s.error_message(), hint);
  }
  {
    ::grpc::ClientContext ctx;
    inference::SystemSharedMemoryRegisterRequest req;
    req.set_name("r");
    req.set_key("/whatever");
    req.set_byte_size(4);
    inference::SystemSharedMemoryRegisterResponse resp;
    ::grpc::Status s = stub_->SystemSharedMemoryRegister(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), ::grpc::StatusCode::UNIMPLEMENTED);
    EXPECT_CONTAINS(s.error_message(), hint);
  }
  inference::ModelInferRequest req = DoubleRequest({1, 2, 3, 4});
  auto* y = req.add_outputs();
  y->set_name("y");
  (*y->mutable_parameters())["shared_memory_region"].set_string_param("r");
  inference::ModelInferResponse resp;
  ::grpc::Status s = Infer(req, &resp);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_CONTAINS(s.error_message(), "output 'y': the shared memory extensions (system and CUDA) are not enabled");
}

// grpc.health.v1.Health/Check through a generic stub (the health proto's
// generated code is not part of gRPC's installed headers). Returns the
// serving status (1 SERVING, 2 NOT_SERVING), or -1 on an RPC error.
int HealthCheck(const std::shared_ptr<::grpc::Channel>& channel, const std::string& service,
                ::grpc::StatusCode* code = nullptr) {
  // HealthCheckRequest { string service = 1; }
  std::string bytes;
  if (!service.empty()) bytes = std::string("\x0a", 1) + static_cast<char>(service.size()) + service;
  ::grpc::Slice slice(bytes);
  ::grpc::ByteBuffer request(&slice, 1), response;
  ::grpc::GenericStub stub(channel);
  ::grpc::ClientContext ctx;
  std::promise<::grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", ::grpc::StubOptions(), &request, &response,
                 [&](::grpc::Status s) { done.set_value(std::move(s)); });
  ::grpc::Status s = done.get_future().get();
  if (code) *code = s.error_code();
  if (!s.ok()) return -1;
  // HealthCheckResponse { ServingStatus status = 1; }: "\x08" + one varint byte.
  ::grpc::Slice out;
  if (!response.DumpToSingleSlice(&out).ok()) return -1;
  const std::string r(reinterpret_cast<const char*>(out.begin()), out.size());
  if (r.empty()) return 0;
  return r.size() == 2 && r[0] == 0x08 ? r[1] : -1;
}

TEST_F(GrpcServerTest, HealthServiceFollowsCoreReadiness) {
  StartServer();
  EXPECT_EQ(HealthCheck(channel_, ""), 1);
  EXPECT_EQ(HealthCheck(channel_, "inference.GRPCInferenceService"), 1);
  ::grpc::StatusCode code;
  EXPECT_EQ(HealthCheck(channel_, "no.such.Service", &code), -1);
  EXPECT_EQ(code, ::grpc::StatusCode::NOT_FOUND);

  // Readiness is copied every 200 ms: allow a few seconds either way.
  auto wait_for = [&](int want) {
    for (int i = 0; i < 100; ++i) {
      if (HealthCheck(channel_, "") == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  };
  core_.ready = false;
  EXPECT_TRUE(wait_for(2));
  EXPECT_EQ(HealthCheck(channel_, "inference.GRPCInferenceService"), 2);
  core_.ready = true;
  EXPECT_TRUE(wait_for(1));
}

}  // namespace
}  // namespace sampan::server
