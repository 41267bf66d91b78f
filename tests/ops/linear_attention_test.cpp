// LinearAttention (src/ops/linear_attention.cpp, opset 27): each update rule by
// hand on a one-dim state, grouped heads, prefill vs token-by-token decode with
// the state carried, inference and bad inputs naming the node.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)
using ir::Attribute;

void ExpectNamesNode(const Status& st, StatusCode code) {
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_NE(st.ToString().find("LinearAttention 'n'"), std::string::npos) << st.ToString();
}

Tensor F32(const std::vector<float>& v, Shape shape) {
  return Tensor::FromVector<float>(DType::kFloat32, v, shape);
}

std::map<std::string, Attribute> Attrs(const std::string& rule, int64_t hq = 1, int64_t hkv = 1, float scale = 1.f) {
  return {{"update_rule", Attribute::String(rule)},
          {"q_num_heads", Attribute::Int(hq)},
          {"kv_num_heads", Attribute::Int(hkv)},
          {"scale", Attribute::Float(scale)}};
}

// B=1, T=2, one head, d_k = d_v = 1: q = [1, 2], k = [1, 1], v = [3, 4].
struct Scalar {
  Tensor q = F32({1, 2}, {1, 2, 1});
  Tensor k = F32({1, 1}, {1, 2, 1});
  Tensor v = F32({3, 4}, {1, 2, 1});
  Tensor decay = F32({0.f, std::log(0.5f)}, {1, 2, 1});  // exp: 1, then 0.5
  Tensor beta = F32({1.f, 0.5f}, {1, 2, 1});
};

void ExpectOutputs(const Result<std::vector<Tensor>>& r, float o0, float o1, float state) {
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{1, 2, 1}));
  ASSERT_EQ((*r)[1].shape(), (Shape{1, 1, 1, 1}));
  EXPECT_NEAR((*r)[0].data<float>()[0], o0, 1e-6);
  EXPECT_NEAR((*r)[0].data<float>()[1], o1, 1e-6);
  EXPECT_NEAR((*r)[1].data<float>()[0], state, 1e-6);
}

TEST(LinearAttention, EachUpdateRuleByHand) {
  Scalar s;
  // linear: S = 3, o = 1*3; S = 3 + 4 = 7, o = 2*7.
  ExpectOutputs(RunOneNode("LinearAttention", {&s.q, &s.k, &s.v}, Attrs("linear"), 27, 2), 3, 14, 7);
  // gated: S = 3; S = 0.5*3 + 4 = 5.5, o = 11.
  ExpectOutputs(RunOneNode("LinearAttention", {&s.q, &s.k, &s.v, nullptr, &s.decay}, Attrs("gated"), 27, 2), 3, 11,
                5.5f);
  // delta: S = 3; v' = 0.5 * (4 - S*k) = 0.5, S = 3.5, o = 7.
  ExpectOutputs(RunOneNode("LinearAttention", {&s.q, &s.k, &s.v, nullptr, nullptr, &s.beta}, Attrs("delta"), 27, 2), 3,
                7, 3.5f);
  // gated_delta: S = 3; S = 1.5 after the decay, v' = 0.5 * (4 - 1.5) = 1.25, S = 2.75, o = 5.5.
  ExpectOutputs(
      RunOneNode("LinearAttention", {&s.q, &s.k, &s.v, nullptr, &s.decay, &s.beta}, Attrs("gated_delta"), 27, 2), 3,
      5.5f, 2.75f);
  // A past state of 2 adds 2 to the first S (linear): S = 5, o = 5; S = 9, o = 18.
  const Tensor past = F32({2}, {1, 1, 1, 1});
  ExpectOutputs(RunOneNode("LinearAttention", {&s.q, &s.k, &s.v, &past}, Attrs("linear"), 27, 2), 5, 18, 9);
}

TEST(LinearAttention, DefaultScaleAndGroupedHeads) {
  // d_k = 4, one token, one KV head read by two query heads: S = k (x) v, o_i = q_i . k * v / sqrt(4).
  const Tensor q = F32({1, 0, 0, 0, 0, 1, 1, 0}, {1, 1, 8});
  const Tensor k = F32({2, 3, 4, 5}, {1, 1, 4});
  const Tensor v = F32({10}, {1, 1, 1});
  auto attrs = Attrs("linear", 2, 1, 0.f);
  auto r = RunOneNode("LinearAttention", {&q, &k, &v}, attrs, 27, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{1, 1, 2}));
  EXPECT_NEAR((*r)[0].data<float>()[0], 0.5f * 2 * 10, 1e-5);        // head 0: q . k = 2
  EXPECT_NEAR((*r)[0].data<float>()[1], 0.5f * (3 + 4) * 10, 1e-5);  // head 1: q . k = 7
  ASSERT_EQ((*r)[1].shape(), (Shape{1, 1, 4, 1}));
}

TEST(LinearAttention, PerKeyDecayAndSharedBeta) {
  // d_k = 2, d_v = 1, two KV heads; decay per key row, beta [B, T, 1] shared by the heads.
  const Tensor q = F32({1, 1, 1, 1}, {1, 1, 4});
  const Tensor k = F32({1, 2, 3, 4}, {1, 1, 4});
  const Tensor v = F32({1, 2}, {1, 1, 2});
  const Tensor past = F32({1, 1, 1, 1}, {1, 2, 2, 1});
  const Tensor decay = F32({0.f, std::log(0.5f), std::log(0.25f), 0.f}, {1, 1, 4});
  const Tensor beta = F32({0.5f}, {1, 1, 1});
  auto r = RunOneNode("LinearAttention", {&q, &k, &v, &past, &decay, &beta}, Attrs("gated_delta", 2, 2), 27, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // head 0: S = [1, 0.5]; S.k = 1 + 1 = 2; v' = 0.5 * (1 - 2) = -0.5; S = [0.5, -0.5]; o = 0.
  // head 1: S = [0.25, 1]; S.k = 0.75 + 4 = 4.75; v' = 0.5 * (2 - 4.75) = -1.375;
  //         S = [0.25 - 4.125, 1 - 5.5] = [-3.875, -4.5]; o = -8.375.
  EXPECT_NEAR((*r)[0].data<float>()[0], 0.f, 1e-6);
  EXPECT_NEAR((*r)[0].data<float>()[1], -8.375f, 1e-5);
  const float want_state[] = {0.5f, -0.5f, -3.875f, -4.5f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR((*r)[1].data<float>()[i], want_state[i], 1e-5) << i;
}

TEST(LinearAttention, PrefillEqualsTokenByTokenDecode) {
  // B=2, T=3, Hq=4, Hkv=2, d_k=3, d_v=2.
  const Tensor q = Random({2, 3, 12}, 1), k = Random({2, 3, 6}, 2), v = Random({2, 3, 4}, 3);
  Tensor decay = Random({2, 3, 2}, 4), beta = Random({2, 3, 2}, 5);
  for (int64_t i = 0; i < decay.numel(); ++i) decay.mutable_data<float>()[i] = -std::fabs(decay.data<float>()[i]);
  for (int64_t i = 0; i < beta.numel(); ++i) beta.mutable_data<float>()[i] = std::fabs(beta.data<float>()[i]);
  const auto attrs = Attrs("gated_delta", 4, 2, 0.f);
  auto whole = RunOneNode("LinearAttention", {&q, &k, &v, nullptr, &decay, &beta}, attrs, 27, 2);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  auto token = [](const Tensor& t, int64_t i) {
    const int64_t b = t.dim(0), n = t.dim(1), d = t.dim(2);
    std::vector<float> out;
    for (int64_t j = 0; j < b; ++j)
      for (int64_t c = 0; c < d; ++c) out.push_back(t.data<float>()[(j * n + i) * d + c]);
    return F32(out, {b, 1, d});
  };
  Tensor state = F32(std::vector<float>(2 * 2 * 3 * 2, 0.f), {2, 2, 3, 2});
  for (int64_t i = 0; i < 3; ++i) {
    const Tensor qi = token(q, i), ki = token(k, i), vi = token(v, i), gi = token(decay, i), bi = token(beta, i);
    auto step = RunOneNode("LinearAttention", {&qi, &ki, &vi, &state, &gi, &bi}, attrs, 27, 2);
    ASSERT_TRUE(step.ok()) << step.status().ToString();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 8; ++c)
        EXPECT_NEAR((*step)[0].data<float>()[b * 8 + c], (*whole)[0].data<float>()[(b * 3 + i) * 8 + c], 1e-5)
            << "token " << i;
    state = (*step)[1];
  }
  for (int64_t i = 0; i < state.numel(); ++i)
    EXPECT_NEAR(state.data<float>()[i], (*whole)[1].data<float>()[i], 1e-5) << i;
}

TEST(LinearAttention, StateTypeFollowsPastState) {
  Scalar s;
  const Tensor past = Tensor::FromVector<float>(DType::kFloat16, {2.f}, {1, 1, 1, 1});
  auto r = RunOneNode("LinearAttention", {&s.q, &s.k, &s.v, &past}, Attrs("linear"), 27, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].dtype(), DType::kFloat32);
  ASSERT_EQ((*r)[1].dtype(), DType::kFloat16);
  EXPECT_EQ(static_cast<float>((*r)[1].data<Half>()[0]), 9.f);
}

TEST(LinearAttention, Inference) {
  auto m = MakeGraph("LinearAttention",
                     {TT({S("B"), S("T"), K(64)}), TT({S("B"), S("T"), K(32)}), TT({S("B"), S("T"), K(16)}),
                      ir::TensorType{}, TT({S("B"), S("T"), K(4)}), TT({S("B"), S("T"), K(1)})},
                     {{"q_num_heads", Attribute::Int(8)}, {"kv_num_heads", Attribute::Int(4)}}, 27, 2);
  ASSERT_TRUE(InferTypes(m->g).ok());
  EXPECT_EQ(m->g.FindValue("out0")->type.ToString(), TT({S("B"), S("T"), K(32)}).ToString());
  EXPECT_EQ(m->g.FindValue("out1")->type.ToString(), TT({S("B"), K(4), K(8), K(4)}).ToString());
}

TEST(LinearAttention, Errors) {
  const ir::TensorType q = TT({K(1), K(2), K(8)}), k = TT({K(1), K(2), K(8)}), v = TT({K(1), K(2), K(4)});
  const ir::TensorType none{};
  auto err = [](std::vector<ir::TensorType> in, std::map<std::string, Attribute> attrs) {
    auto m = MakeGraph("LinearAttention", in, std::move(attrs), 27, 2);
    return InferTypes(m->g);
  };
  ExpectNamesNode(err({q, k, v}, Attrs("linear", 3, 2)), StatusCode::kInvalidArgument);  // 3 % 2
  ExpectNamesNode(err({q, k, v}, Attrs("gated", 2, 2)), StatusCode::kInvalidArgument);   // no decay
  ExpectNamesNode(err({q, k, v, none, none, TT({K(1), K(2), K(2)})}, Attrs("linear", 2, 2)),
                  StatusCode::kInvalidArgument);  // beta with no delta rule
  ExpectNamesNode(err({q, k, v}, Attrs("softmax", 2, 2)), StatusCode::kInvalidArgument);
  ExpectNamesNode(err({q, TT({K(1), K(2), K(6)}), v}, Attrs("linear", 2, 2)), StatusCode::kInvalidArgument);  // d_k
  ExpectNamesNode(err({q, k, TT({K(1), K(3), K(4)})}, Attrs("linear", 2, 2)), StatusCode::kInvalidArgument);  // T
  ExpectNamesNode(err({q, k, v, TT({K(1), K(2), K(4), K(3)})}, Attrs("linear", 2, 2)),
                  StatusCode::kInvalidArgument);  // past d_v is 2
  ExpectNamesNode(err({q, k, v, none, TT({K(1), K(2), K(3)})}, Attrs("gated", 2, 2)),
                  StatusCode::kInvalidArgument);  // decay last dim 3
  ExpectNamesNode(err({q, k, v, none, none, TT({K(1), K(2), K(3)})}, Attrs("delta", 2, 2)),
                  StatusCode::kInvalidArgument);  // beta last dim 3
  ExpectNamesNode(err({TT({K(1), K(2), K(8)}, DType::kFloat64), TT({K(1), K(2), K(8)}, DType::kFloat64),
                       TT({K(1), K(2), K(4)}, DType::kFloat64)},
                      Attrs("linear", 2, 2)),
                  StatusCode::kUnsupported);
  auto no_heads = Attrs("linear", 2, 2);
  no_heads.erase("q_num_heads");
  ExpectNamesNode(err({q, k, v}, no_heads), StatusCode::kInvalidArgument);
  auto m = MakeGraph("LinearAttention", {q, k, v}, Attrs("linear", 2, 2), 26, 2);
  ExpectNamesNode(InferTypes(m->g), StatusCode::kInvalidArgument);  // defined from opset 27
}

}  // namespace
}  // namespace sampan::ops
