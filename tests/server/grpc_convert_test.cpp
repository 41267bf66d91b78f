// gRPC front-end translation rules that need no network: status mapping,
// loopback peers, bearer tokens, typed-contents conversion, tensors in system
// shared memory.
#include "server/grpc/grpc_convert.h"

#include <gtest/gtest.h>

#include <cstring>

#include "server/grpc_fake_core.h"

namespace sampan::server {
namespace {

TEST(GrpcConvertTest, StatusCodesAsTritonSendsThem) {
  EXPECT_TRUE(ToGrpcStatus(Status::Ok()).ok());
  const std::vector<std::pair<Status, ::grpc::StatusCode>> cases = {
      {InvalidArgument("a"), ::grpc::StatusCode::INVALID_ARGUMENT},
      {NotFound("b"), ::grpc::StatusCode::NOT_FOUND},
      {Unavailable("c"), ::grpc::StatusCode::UNAVAILABLE},
      {Internal("d"), ::grpc::StatusCode::INTERNAL},
      {Cancelled("e"), ::grpc::StatusCode::CANCELLED},
      {DeadlineExceeded("f"), ::grpc::StatusCode::DEADLINE_EXCEEDED},
      {Unsupported("g"), ::grpc::StatusCode::UNIMPLEMENTED},
      {FailedPrecondition("h"), ::grpc::StatusCode::FAILED_PRECONDITION},
  };
  for (const auto& [status, code] : cases) {
    ::grpc::Status g = ToGrpcStatus(status);
    EXPECT_EQ(g.error_code(), code) << status.ToString();
    EXPECT_EQ(g.error_message(), status.message());
  }
}

TEST(GrpcConvertTest, LoopbackPeers) {
  for (const char* peer : {"ipv4:127.0.0.1:5000", "ipv4:127.8.9.1:1", "ipv6:[::1]:5000", "ipv6:%5B::1%5D:5000",
                           "ipv6:[::ffff:127.0.0.1]:80", "unix:/tmp/sock", "unix-abstract:x"})
    EXPECT_TRUE(IsLoopbackPeer(peer)) << peer;
  for (const char* peer : {"ipv4:10.0.0.1:5000", "ipv4:128.0.0.1:1", "ipv6:[2001:db8::1]:5000",
                           "ipv6:[::ffff:10.0.0.1]:80", "ipv4:garbage", "", "ipv6:::1", "dns:localhost"})
    EXPECT_FALSE(IsLoopbackPeer(peer)) << peer;
}

TEST(GrpcConvertTest, BearerToken) {
  EXPECT_TRUE(BearerTokenMatches("Bearer abc", "abc"));
  EXPECT_TRUE(BearerTokenMatches("bearer abc", "abc"));
  EXPECT_FALSE(BearerTokenMatches("Bearer abcd", "abc"));
  EXPECT_FALSE(BearerTokenMatches("Bearer ab", "abc"));
  EXPECT_FALSE(BearerTokenMatches("abc", "abc"));
  EXPECT_FALSE(BearerTokenMatches("Basic abc", "abc"));
  EXPECT_FALSE(BearerTokenMatches("Bearer ", ""));  // no token configured never matches
}

TEST(GrpcConvertTest, TypedContentsOfEveryFieldType) {
  auto msg = std::make_shared<inference::ModelInferRequest>();
  msg->set_model_name("m");
  auto add = [&](const char* name, const char* dt) {
    auto* in = msg->add_inputs();
    in->set_name(name);
    in->set_datatype(dt);
    in->add_shape(2);
    return in->mutable_contents();
  };
  auto* b = add("b", "BOOL");
  b->add_bool_contents(true);
  b->add_bool_contents(false);
  auto* u8 = add("u8", "UINT8");
  u8->add_uint_contents(255);
  u8->add_uint_contents(0);
  auto* i16 = add("i16", "INT16");
  i16->add_int_contents(-32768);
  i16->add_int_contents(7);
  auto* u64 = add("u64", "UINT64");
  u64->add_uint64_contents(~0ull);
  u64->add_uint64_contents(1);
  auto* f64 = add("f64", "FP64");
  f64->add_fp64_contents(0.25);
  f64->add_fp64_contents(-2);
  Result<InferRequest> r = InferRequestFromProto(msg);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->inputs.size(), 5u);
  EXPECT_EQ(r->inputs[0].dtype, DType::kBool);
  EXPECT_TRUE(r->inputs[0].data.data<bool>()[0]);
  EXPECT_FALSE(r->inputs[0].data.data<bool>()[1]);
  EXPECT_EQ(r->inputs[1].data.data<uint8_t>()[0], 255);
  EXPECT_EQ(r->inputs[2].data.data<int16_t>()[0], -32768);
  EXPECT_EQ(r->inputs[3].data.data<uint64_t>()[0], ~0ull);
  EXPECT_EQ(r->inputs[4].data.data<double>()[1], -2.0);

  u8->set_uint_contents(0, 256);
  r = InferRequestFromProto(msg);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "input 'u8': contents[0] = 256 does not fit UINT8");
}

TEST(GrpcConvertTest, ResponseToProtoKeepsOrderAndBytes) {
  InferResponse resp;
  resp.model_name = "m";
  resp.model_version = "3";
  resp.id = "q";
  resp.outputs.push_back({"b", DType::kInt32, {2}, Tensor::FromVector<int32_t>(DType::kInt32, {7, 8}, {2})});
  resp.outputs.push_back({"a", DType::kFloat16, {1}, Tensor::Alloc(DType::kFloat16, {1})});
  inference::ModelInferResponse out;
  ASSERT_TRUE(InferResponseToProto(resp, &out).ok());
  EXPECT_EQ(out.model_version(), "3");
  ASSERT_EQ(out.outputs_size(), 2);
  EXPECT_EQ(out.outputs(0).name(), "b");
  EXPECT_EQ(out.outputs(0).datatype(), "INT32");
  EXPECT_EQ(out.outputs(1).datatype(), "FP16");
  ASSERT_EQ(out.raw_output_contents(0).size(), 8u);
  int32_t v[2];
  std::memcpy(v, out.raw_output_contents(0).data(), 8);
  EXPECT_EQ(v[1], 8);
  EXPECT_EQ(out.raw_output_contents(1).size(), 2u);
}

void SetShm(google::protobuf::Map<std::string, inference::InferParameter>* params, const std::string& region,
            int64_t byte_size, int64_t offset = 0) {
  (*params)["shared_memory_region"].set_string_param(region);
  (*params)["shared_memory_byte_size"].set_int64_param(byte_size);
  if (offset) (*params)["shared_memory_offset"].set_int64_param(offset);
}

TEST(GrpcConvertTest, SharedMemoryInputsWrapTheRegionAndRawContentsSkipThem) {
  testing::ShmObject obj("convert", 64);
  ASSERT_NE(obj.base(), nullptr);
  const float a[4] = {1, 2, 3, 4};
  std::memcpy(obj.base() + 16, a, sizeof(a));
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("r", obj.key(), 0, 64).ok());

  auto msg = std::make_shared<inference::ModelInferRequest>();
  msg->set_model_name("m");
  auto add = [&](const char* name) {
    auto* in = msg->add_inputs();
    in->set_name(name);
    in->set_datatype("FP32");
    in->add_shape(1);
    in->add_shape(4);
    return in;
  };
  add("b");  // raw_input_contents[0]
  SetShm(add("a")->mutable_parameters(), "r", 16, 16);
  add("c");  // raw_input_contents[1]
  const float b[4] = {5, 6, 7, 8}, c[4] = {9, 10, 11, 12};
  msg->add_raw_input_contents(std::string(reinterpret_cast<const char*>(b), sizeof(b)));
  msg->add_raw_input_contents(std::string(reinterpret_cast<const char*>(c), sizeof(c)));
  auto* out = msg->add_outputs();
  out->set_name("y");
  SetShm(out->mutable_parameters(), "r", 32, 32);
  msg->add_outputs()->set_name("z");

  std::vector<SharedMemoryOutput> shm_outputs;
  Result<InferRequest> r = InferRequestFromProto(msg, &registry, &shm_outputs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->inputs.size(), 3u);
  EXPECT_EQ(r->inputs[0].data.data<float>()[3], 8.0f);
  EXPECT_EQ(r->inputs[1].name, "a");
  EXPECT_EQ(r->inputs[2].data.data<float>()[0], 9.0f);
  // Zero copy: the server's own mapping of the region (a different address
  // from this test's mapping, but the same bytes).
  const SharedMemoryView view = registry.View("r", 16, 16).value();
  EXPECT_EQ(r->inputs[1].data.raw(), view.data);
  EXPECT_EQ(r->inputs[1].data.data<float>()[2], 3.0f);
  ASSERT_EQ(shm_outputs.size(), 1u);
  EXPECT_EQ(shm_outputs[0].name, "y");
  EXPECT_EQ(shm_outputs[0].offset, 32u);
  EXPECT_EQ(r->outputs, (std::vector<std::string>{"y", "z"}));

  // The region stays mapped for the request after it is unregistered.
  ASSERT_TRUE(registry.Unregister("r", SharedMemoryKind::kSystem).ok());
  EXPECT_EQ(r->inputs[1].data.data<float>()[0], 1.0f);

  // The response: y into the region (an empty raw entry), z in the message.
  InferResponse resp;
  resp.model_name = "m";
  resp.outputs.push_back(
      {"y", DType::kFloat32, {1, 4}, Tensor::FromVector<float>(DType::kFloat32, {7, 7, 7, 7}, {1, 4})});
  resp.outputs.push_back({"z", DType::kInt32, {1}, Tensor::FromVector<int32_t>(DType::kInt32, {3}, {1})});
  inference::ModelInferResponse proto;
  ASSERT_TRUE(InferResponseToProto(resp, &proto, shm_outputs).ok());
  ASSERT_EQ(proto.raw_output_contents_size(), 2);
  EXPECT_TRUE(proto.raw_output_contents(0).empty());
  EXPECT_EQ(proto.raw_output_contents(1).size(), 4u);
  const auto& params = proto.outputs(0).parameters();
  EXPECT_EQ(params.at("shared_memory_region").string_param(), "r");
  EXPECT_EQ(params.at("shared_memory_byte_size").int64_param(), 16);
  EXPECT_EQ(params.at("shared_memory_offset").int64_param(), 32);
  EXPECT_TRUE(proto.outputs(1).parameters().empty());
  float y[4];
  std::memcpy(y, obj.base() + 32, sizeof(y));  // seen through the client's mapping
  EXPECT_EQ(y[3], 7.0f);

  // An output larger than the room given.
  shm_outputs[0].byte_size = 8;
  inference::ModelInferResponse small;
  Status s = InferResponseToProto(resp, &small, shm_outputs);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "output 'y' has 16 bytes, more than the 8 bytes given in shared-memory region 'r'");
}

TEST(GrpcConvertTest, SharedMemoryErrorsNameTensorAndRegion) {
  testing::ShmObject obj("convert_errors", 64);
  ASSERT_NE(obj.base(), nullptr);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("r", obj.key(), 0, 64).ok());
  struct Case {
    std::string what;
    std::function<void(inference::ModelInferRequest*)> mutate;
    StatusCode code;
    std::string message;
    bool extension_on = true;
  };
  auto in_params = [](inference::ModelInferRequest* m) { return m->mutable_inputs(0)->mutable_parameters(); };
  const std::vector<Case> cases = {
      {"extension off", [&](auto* m) { SetShm(in_params(m), "r", 16); }, StatusCode::kUnsupported,
       "input 'x': the shared memory extensions (system and CUDA) are not enabled on this server (start sampan "
       "serve with --enable-shared-memory)",
       false},
      {"output, extension off",
       [&](auto* m) {
         m->add_raw_input_contents(std::string(16, '\0'));
         auto* o = m->add_outputs();
         o->set_name("y");
         SetShm(o->mutable_parameters(), "r", 16);
       },
       StatusCode::kUnsupported, "output 'y': the shared memory extensions (system and CUDA) are not enabled", false},
      {"unknown region", [&](auto* m) { SetShm(in_params(m), "nope", 16); }, StatusCode::kInvalidArgument,
       "input 'x': Unable to find shared memory region: 'nope'"},
      {"size", [&](auto* m) { SetShm(in_params(m), "r", 12); }, StatusCode::kInvalidArgument,
       "input 'x': shared_memory_byte_size is 12 bytes (region 'r') but FP32 [1,4] needs 16"},
      {"beyond", [&](auto* m) { SetShm(in_params(m), "r", 16, 56); }, StatusCode::kInvalidArgument,
       "input 'x': shared-memory region 'r': offset 56 + byte size 16 is beyond its 64 bytes"},
      {"no byte size", [&](auto* m) { (*in_params(m))["shared_memory_region"].set_string_param("r"); },
       StatusCode::kInvalidArgument,
       "input 'x': parameter 'shared_memory_byte_size' is required with shared-memory region 'r'"},
      {"no region", [&](auto* m) { (*in_params(m))["shared_memory_offset"].set_int64_param(0); },
       StatusCode::kInvalidArgument, "given without 'shared_memory_region'"},
      {"region type", [&](auto* m) { (*in_params(m))["shared_memory_region"].set_int64_param(1); },
       StatusCode::kInvalidArgument, "'shared_memory_region' must be a non-empty string_param"},
      {"negative offset",
       [&](auto* m) {
         SetShm(in_params(m), "r", 16);
         (*in_params(m))["shared_memory_offset"].set_int64_param(-4);
       },
       StatusCode::kInvalidArgument, "input 'x': parameter 'shared_memory_offset' must be a non-negative integer"},
      {"raw entry for it",
       [&](auto* m) {
         SetShm(in_params(m), "r", 16);
         m->add_raw_input_contents(std::string(16, '\0'));
       },
       StatusCode::kInvalidArgument, "0 inputs not in shared memory but 1 raw_input_contents"},
      {"contents too",
       [&](auto* m) {
         SetShm(in_params(m), "r", 16);
         for (int i = 0; i < 4; ++i) m->mutable_inputs(0)->mutable_contents()->add_fp32_contents(1);
       },
       StatusCode::kInvalidArgument, "input 'x' is in shared-memory region 'r' and also has contents"},
      {"output beyond",
       [&](auto* m) {
         SetShm(in_params(m), "r", 16);
         auto* o = m->add_outputs();
         o->set_name("y");
         SetShm(o->mutable_parameters(), "r", 65);
       },
       StatusCode::kInvalidArgument, "output 'y': shared-memory region 'r': offset 0 + byte size 65 is beyond"},
      {"output twice",
       [&](auto* m) {
         SetShm(in_params(m), "r", 16);
         for (int i = 0; i < 2; ++i) {
           auto* o = m->add_outputs();
           o->set_name("y");
           SetShm(o->mutable_parameters(), "r", 16);
         }
       },
       StatusCode::kInvalidArgument, "output 'y' is requested in shared memory twice"},
  };
  for (const Case& c : cases) {
    auto msg = std::make_shared<inference::ModelInferRequest>();
    msg->set_model_name("m");
    auto* in = msg->add_inputs();
    in->set_name("x");
    in->set_datatype("FP32");
    in->add_shape(1);
    in->add_shape(4);
    c.mutate(msg.get());
    std::vector<SharedMemoryOutput> outs;
    Result<InferRequest> r = InferRequestFromProto(msg, c.extension_on ? &registry : nullptr, &outs);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.status().code(), c.code) << c.what << ": " << r.status().ToString();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << c.what << "\n  message: " << r.status().message() << "\n  lacks:   " << c.message;
  }
}

}  // namespace
}  // namespace sampan::server
