// gRPC front-end translation rules that need no network: status mapping,
// loopback peers, bearer tokens, typed-contents conversion.
#include "server/grpc/grpc_convert.h"

#include <gtest/gtest.h>

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
  InferResponseToProto(resp, &out);
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

}  // namespace
}  // namespace sampan::server
