// ParseInferRequest on JSON numbers: full precision, and zeros written with an
// exponent ("0e+300"), which RapidJSON 1.1's full-precision parser turns into
// garbage (found by the libFuzzer tier, tests/fuzz).
#include "server/http/http_infer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

namespace sampan::server::http {
namespace {

Result<InferRequest> Parse(const std::string& json) {
  auto owner = std::make_shared<std::string>(json);
  InferRequest request;
  OutputFormat format;
  Status s = ParseInferRequest(owner->data(), owner->size(), owner->size(), owner, "m", "", &request, &format);
  if (!s.ok()) return s;
  return request;
}

TEST(HttpInferJson, ZerosWithExponentsAreZeroAndOtherNumbersKeepFullPrecision) {
  auto r = Parse(R"({"id": "0e+300", "inputs": [{"name": "x", "shape": [9], "datatype": "FP64",
                     "data": [0e+300, -0.000E-310, 0.0e5, 1.5e2, 0.1, 2.2250738585072014e-308, 10e-1,
                              0.00000000000000000000000, -0e5]}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->id, "0e+300") << "strings are left alone";
  ASSERT_EQ(r->inputs.size(), 1u);
  const double* v = r->inputs[0].data.data<double>();
  EXPECT_EQ(v[0], 0.0);
  EXPECT_EQ(v[1], 0.0);
  EXPECT_EQ(v[2], 0.0);
  EXPECT_EQ(v[3], 150.0);
  EXPECT_EQ(v[4], 0.1);
  EXPECT_EQ(v[5], 2.2250738585072014e-308);
  EXPECT_EQ(v[6], 1.0);
  EXPECT_EQ(v[7], 0.0) << "23 zero fraction digits take the same broken path";
  EXPECT_EQ(v[8], 0.0);
  EXPECT_TRUE(std::signbit(v[8])) << "-0e5 stays a negative zero";
  EXPECT_TRUE(std::signbit(v[1]));
}

TEST(HttpInferJson, IncompleteExponentsStillFailAndIntegerZerosStayIntegers) {
  for (const char* bad : {"0e", "0e+", "0.", "-"}) {
    auto r =
        Parse(std::string(R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [)") + bad + "]}]}");
    EXPECT_FALSE(r.ok()) << bad;
  }
  auto ints = Parse(R"({"inputs": [{"name": "x", "shape": [2], "datatype": "INT64", "data": [0, -0]}]})");
  ASSERT_TRUE(ints.ok()) << ints.status().ToString();
  EXPECT_EQ(ints->inputs[0].data.data<int64_t>()[0], 0);
  auto zero_double = Parse(R"({"inputs": [{"name": "x", "shape": [1], "datatype": "INT64", "data": [0e5]}]})");
  EXPECT_FALSE(zero_double.ok()) << "a number with an exponent is not an integer, as before";
}

TEST(HttpInferJson, BlankedExponentsKeepErrorOffsetsAndMalformedJsonStillFails) {
  auto r = Parse(R"({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [0e+300]}] )");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("malformed JSON"), std::string::npos) << r.status().ToString();
}

TEST(HttpInferJson, SequenceParametersAreTyped) {
  const std::string x = R"(, "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]})";
  auto n = Parse(R"({"parameters": {"sequence_id": 18446744073709551615, "sequence_start": true})" + x);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->sequence.number, 18446744073709551615ull);
  EXPECT_TRUE(n->sequence.start && !n->sequence.end && n->sequence.text.empty());
  EXPECT_TRUE(n->parameters.empty()) << "typed, not passed through";
  auto s = Parse(R"({"parameters": {"sequence_id": "order-7", "sequence_end": true})" + x);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->sequence.text, "order-7");
  EXPECT_TRUE(s->sequence.end && s->sequence.given());
  for (const char* bad : {R"("sequence_id": -4)", R"("sequence_id": 1.5)", R"("sequence_id": true)",
                          R"("sequence_start": 1)", R"("sequence_end": "yes")"}) {
    auto r = Parse(std::string(R"({"parameters": {)") + bad + "}" + x);
    EXPECT_FALSE(r.ok()) << bad;
  }
}

}  // namespace
}  // namespace sampan::server::http
