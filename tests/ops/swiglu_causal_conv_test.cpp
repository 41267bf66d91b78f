// SwiGLU (src/ops/swiglu.cpp, opset 28) and CausalConvWithState
// (src/ops/causal_conv.cpp, opset 27): hand-checked values, shape inference,
// state carried across calls, and bad inputs naming the node.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)
using ir::Attribute;

void ExpectNamesNode(const Status& st, StatusCode code, const std::string& op) {
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_NE(st.ToString().find(op + " 'n'"), std::string::npos) << st.ToString();
}

Result<std::vector<ir::TensorType>> Infer(const std::string& op, const std::vector<ir::TensorType>& inputs,
                                          std::map<std::string, Attribute> attrs, int64_t opset, size_t n_out) {
  auto m = MakeGraph(op, inputs, std::move(attrs), opset, n_out);
  SP_RETURN_IF_ERROR(InferTypes(m->g));
  std::vector<ir::TensorType> r;
  for (size_t i = 0; i < n_out; ++i) r.push_back(m->g.FindValue("out" + std::to_string(i))->type);
  return r;
}

Tensor F32(const std::vector<float>& v, Shape shape) {
  return Tensor::FromVector<float>(DType::kFloat32, v, shape);
}

// ---- SwiGLU

TEST(SwiGLU, HandChecked) {
  const Tensor a = F32({0.f, 1.f, -2.f}, {3});
  const Tensor b = F32({3.f, 2.f, 1.f}, {3});
  auto r = RunOneNode("SwiGLU", {&a, &b}, {}, 28);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const float* y = (*r)[0].data<float>();
  EXPECT_EQ(y[0], 0.f);
  EXPECT_NEAR(y[1], 2 * 0.7310586f, 1e-6);    // 1 * sigmoid(1) * 2
  EXPECT_NEAR(y[2], -2 * 0.11920292f, 1e-6);  // -2 * sigmoid(-2) * 1
  auto alpha = RunOneNode("SwiGLU", {&a, &b}, {{"alpha", Attribute::Float(2.f)}}, 28);
  ASSERT_TRUE(alpha.ok()) << alpha.status().ToString();
  EXPECT_NEAR((*alpha)[0].data<float>()[1], 2 * 0.8807971f, 1e-6);  // sigmoid(2 * 1) * 2
}

TEST(SwiGLU, Float16) {
  const Tensor a = Tensor::FromVector<float>(DType::kFloat16, {1.f, 4.f}, {2});
  const Tensor b = Tensor::FromVector<float>(DType::kFloat16, {2.f, -1.f}, {2});
  auto r = RunOneNode("SwiGLU", {&a, &b}, {}, 28);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NEAR(static_cast<float>((*r)[0].data<Half>()[0]), 1.4621172f, 2e-3);
  EXPECT_NEAR(static_cast<float>((*r)[0].data<Half>()[1]), -3.928055f, 4e-3);  // -4 * sigmoid(4)
}

TEST(SwiGLU, InferenceKeepsSymbolsAndRefusesBroadcasting) {
  auto t = Infer("SwiGLU", {TT({S("N"), K(8)}), TT({K(2), S("D")})}, {}, 28, 1);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)[0].ToString(), TT({K(2), K(8)}).ToString());  // each dim from whichever input knows it
  ExpectNamesNode(Infer("SwiGLU", {TT({K(2), K(8)}), TT({K(1), K(8)})}, {}, 28, 1).status(),
                  StatusCode::kInvalidArgument, "SwiGLU");
  ExpectNamesNode(Infer("SwiGLU", {TT({K(8)}), TT({K(2), K(8)})}, {}, 28, 1).status(), StatusCode::kInvalidArgument,
                  "SwiGLU");
  ExpectNamesNode(Infer("SwiGLU", {TT({K(8)}), TT({K(8)}, DType::kFloat16)}, {}, 28, 1).status(),
                  StatusCode::kInvalidArgument, "SwiGLU");
  ExpectNamesNode(Infer("SwiGLU", {TT({K(8)}, DType::kInt32), TT({K(8)}, DType::kInt32)}, {}, 28, 1).status(),
                  StatusCode::kUnsupported, "SwiGLU");
}

TEST(SwiGLU, NotBeforeOpset28) {
  ExpectNamesNode(Infer("SwiGLU", {TT({K(8)}), TT({K(8)})}, {}, 27, 1).status(), StatusCode::kInvalidArgument,
                  "SwiGLU");
}

// ---- CausalConvWithState

// x: channel 0 = [1, 2, 3], channel 1 = [4, 5, 6]; kernels [1, 10] and [2, -1] (the first
// tap reads the older position); bias [0.5, -0.5].
struct ConvCase {
  Tensor x = F32({1, 2, 3, 4, 5, 6}, {1, 2, 3});
  Tensor w = F32({1, 10, 2, -1}, {2, 1, 2});
  Tensor bias = F32({0.5f, -0.5f}, {2});
};

TEST(CausalConvWithState, HandCheckedWithoutPast) {
  ConvCase c;
  auto r = RunOneNode("CausalConvWithState", {&c.x, &c.w, &c.bias}, {}, 27, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // channel 0, padded [0, 1, 2, 3]: 0*1 + 1*10, 1 + 20, 2 + 30; channel 1, padded [0, 4, 5, 6]:
  // -4, 8 - 5, 10 - 6; then the bias.
  const std::vector<float> want = {10.5f, 21.5f, 32.5f, -4.5f, 2.5f, 3.5f};
  ASSERT_EQ((*r)[0].shape(), (Shape{1, 2, 3}));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ((*r)[0].data<float>()[i], want[i]) << i;
  ASSERT_EQ((*r)[1].shape(), (Shape{1, 2, 1}));
  EXPECT_EQ((*r)[1].data<float>()[0], 3.f);
  EXPECT_EQ((*r)[1].data<float>()[1], 6.f);
}

TEST(CausalConvWithState, PastStateAndSilu) {
  ConvCase c;
  const Tensor past = F32({7, 8}, {1, 2, 1});
  auto r = RunOneNode("CausalConvWithState", {&c.x, &c.w, nullptr, &past}, {{"activation", Attribute::String("silu")}},
                      27, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // channel 0, t=0: 7*1 + 1*10 = 17; channel 1, t=0: 8*2 - 4 = 12; then y * sigmoid(y).
  auto silu = [](float v) { return v / (1.f + std::exp(-v)); };
  EXPECT_NEAR((*r)[0].data<float>()[0], silu(17.f), 1e-5);
  EXPECT_NEAR((*r)[0].data<float>()[1], silu(21.f), 1e-5);
  EXPECT_NEAR((*r)[0].data<float>()[3], silu(12.f), 1e-5);
  EXPECT_NEAR((*r)[0].data<float>()[4], silu(3.f), 1e-5);
}

TEST(CausalConvWithState, ChunkedCallsMatchOneCall) {
  const Tensor x = Random({2, 3, 7}, 1);
  const Tensor w = Random({3, 1, 4}, 2);
  const Tensor bias = Random({3}, 3);
  auto whole = RunOneNode("CausalConvWithState", {&x, &w, &bias}, {{"activation", Attribute::String("swish")}}, 27, 2);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  // The same sequence in chunks of 5 and 2 positions, the state carried between them.
  std::vector<float> first, second;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t ch = 0; ch < 3; ++ch)
      for (int64_t t = 0; t < 7; ++t) (t < 5 ? first : second).push_back(x.data<float>()[(n * 3 + ch) * 7 + t]);
  const Tensor x1 = F32(first, {2, 3, 5}), x2 = F32(second, {2, 3, 2});
  auto a = RunOneNode("CausalConvWithState", {&x1, &w, &bias}, {{"activation", Attribute::String("swish")}}, 27, 2);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = RunOneNode("CausalConvWithState", {&x2, &w, &bias, &(*a)[1]}, {{"activation", Attribute::String("swish")}},
                      27, 2);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t ch = 0; ch < 3; ++ch)
      for (int64_t t = 0; t < 7; ++t) {
        const float got =
            t < 5 ? (*a)[0].data<float>()[(n * 3 + ch) * 5 + t] : (*b)[0].data<float>()[(n * 3 + ch) * 2 + t - 5];
        EXPECT_FLOAT_EQ(got, (*whole)[0].data<float>()[(n * 3 + ch) * 7 + t]) << n << "," << ch << "," << t;
      }
  for (int64_t i = 0; i < (*whole)[1].numel(); ++i)
    EXPECT_EQ((*b)[1].data<float>()[i], (*whole)[1].data<float>()[i]) << i;
}

TEST(CausalConvWithState, Inference) {
  auto t = Infer("CausalConvWithState", {TT({S("B"), K(4), S("L")}), TT({K(4), K(1), K(3)})}, {}, 27, 2);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)[0].ToString(), TT({S("B"), K(4), S("L")}).ToString());
  EXPECT_EQ((*t)[1].ToString(), TT({S("B"), K(4), K(2)}).ToString());
  // Channels from the weight, batch from the past state.
  auto u = Infer("CausalConvWithState",
                 {TT({S("B"), S("C"), K(5)}), TT({K(6), K(1), K(2)}), ir::TensorType{}, TT({K(3), S("C"), K(1)})}, {},
                 27, 2);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ((*u)[0].ToString(), TT({K(3), K(6), K(5)}).ToString());
}

TEST(CausalConvWithState, Errors) {
  const ir::TensorType x = TT({K(1), K(4), K(5)});
  auto err = [&](std::vector<ir::TensorType> in, std::map<std::string, Attribute> attrs = {}) {
    return Infer("CausalConvWithState", in, std::move(attrs), 27, 2).status();
  };
  ExpectNamesNode(err({x, TT({K(4), K(2), K(3)})}), StatusCode::kInvalidArgument, "CausalConvWithState");
  ExpectNamesNode(err({x, TT({K(3), K(1), K(3)})}), StatusCode::kInvalidArgument, "CausalConvWithState");
  ExpectNamesNode(err({x, TT({K(4), K(1), K(3)}), TT({K(5)})}), StatusCode::kInvalidArgument, "CausalConvWithState");
  ExpectNamesNode(err({x, TT({K(4), K(1), K(3)}), ir::TensorType{}, TT({K(1), K(4), K(3)})}),
                  StatusCode::kInvalidArgument, "CausalConvWithState");  // state length must be k - 1 = 2
  ExpectNamesNode(err({x, TT({K(4), K(1), K(3)})}, {{"activation", Attribute::String("relu")}}),
                  StatusCode::kInvalidArgument, "CausalConvWithState");
  ExpectNamesNode(err({TT({K(4), K(5)}), TT({K(4), K(1), K(3)})}), StatusCode::kInvalidArgument, "CausalConvWithState");
  ExpectNamesNode(err({x, TT({K(4), K(1), K(0)})}), StatusCode::kInvalidArgument, "CausalConvWithState");
  ExpectNamesNode(err({TT({K(1), K(4), K(5)}, DType::kFloat64), TT({K(4), K(1), K(3)}, DType::kFloat64)}),
                  StatusCode::kUnsupported, "CausalConvWithState");
  ExpectNamesNode(Infer("CausalConvWithState", {x, TT({K(4), K(1), K(3)})}, {}, 26, 2).status(),
                  StatusCode::kInvalidArgument, "CausalConvWithState");
}

}  // namespace
}  // namespace sampan::ops
