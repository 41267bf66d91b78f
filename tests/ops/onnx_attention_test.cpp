// ONNX Attention (default domain) and RotaryEmbedding: symbolic shape inference,
// error cases, and numerics the conformance cases do not cover (GQA + past +
// causal 3-D layout against a naive loop, partial interleaved rotary).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/op_test_util.h"
#include "ops/run_node.h"

namespace sampan::ops {
namespace {

using ir::Dim;
using ir::TensorType;
using namespace testing;  // NOLINT(google-build-using-namespace)


TEST(OnnxAttentionInfer, SymbolicShapesWithPast) {
  auto m = MakeGraph("Attention",
                     {TT({S("B"), K(4), S("L"), K(8)}), TT({S("B"), K(2), S("L"), K(8)}),
                      TT({S("B"), K(2), S("L"), K(6)}), TensorType{}, TT({S("B"), K(2), K(5), K(8)}),
                      TT({S("B"), K(2), K(5), K(6)})},
                     {}, 23, 4);
  ASSERT_TRUE(InferTypes(m->g).ok());
  EXPECT_EQ(m->g.FindValue("out0")->type.ToString(), TT({S("B"), K(4), S("L"), K(6)}).ToString());
  const auto& pk = m->g.FindValue("out1")->type;
  ASSERT_TRUE(pk.dims.has_value());
  EXPECT_EQ(pk.dims->size(), 4u);
  EXPECT_EQ((*pk.dims)[1].value, 2);
  EXPECT_FALSE((*pk.dims)[2].known());  // 5 + L
  EXPECT_EQ((*pk.dims)[3].value, 8);
  const auto& qk = m->g.FindValue("out3")->type;
  ASSERT_TRUE(qk.dims.has_value());
  EXPECT_EQ((*qk.dims)[1].value, 4);

  // 3-D layout: Y is [B, Sq, Hq * Dv].
  auto m3 = MakeGraph("Attention", {TT({S("B"), S("L"), K(32)}), TT({S("B"), S("M"), K(16)}), TT({S("B"), S("M"), K(12)})},
                      {{"q_num_heads", ir::Attribute::Int(4)}, {"kv_num_heads", ir::Attribute::Int(2)}}, 23, 1);
  ASSERT_TRUE(InferTypes(m3->g).ok());
  EXPECT_EQ(m3->g.FindValue("out0")->type.ToString(), TT({S("B"), S("L"), K(24)}).ToString());
}

TEST(OnnxAttentionInfer, Errors) {
  // 3-D without head counts.
  auto m = MakeGraph("Attention", {TT({K(1), K(3), K(8)}), TT({K(1), K(3), K(8)}), TT({K(1), K(3), K(8)})}, {}, 23, 1);
  EXPECT_EQ(InferTypes(m->g).code(), StatusCode::kInvalidArgument);
  // q heads not a multiple of kv heads.
  m = MakeGraph("Attention", {TT({K(1), K(3), K(2), K(4)}), TT({K(1), K(2), K(2), K(4)}), TT({K(1), K(2), K(2), K(4)})},
                {}, 23, 1);
  EXPECT_EQ(InferTypes(m->g).code(), StatusCode::kInvalidArgument);
  // Bad qk_matmul_output_mode.
  m = MakeGraph("Attention", {TT({K(1), K(2), K(2), K(4)}), TT({K(1), K(2), K(2), K(4)}), TT({K(1), K(2), K(2), K(4)})},
                {{"qk_matmul_output_mode", ir::Attribute::Int(7)}}, 23, 1);
  EXPECT_EQ(InferTypes(m->g).code(), StatusCode::kInvalidArgument);
  // softcap with a causal mask: unsupported (reference lets masked keys leak).
  m = MakeGraph("Attention", {TT({K(1), K(2), K(2), K(4)}), TT({K(1), K(2), K(2), K(4)}), TT({K(1), K(2), K(2), K(4)})},
                {{"softcap", ir::Attribute::Float(2.f)}, {"is_causal", ir::Attribute::Int(1)}}, 23, 1);
  EXPECT_EQ(InferTypes(m->g).code(), StatusCode::kUnsupported);
  // RotaryEmbedding: 3-D input without num_heads, odd rotary dim.
  m = MakeGraph("RotaryEmbedding", {TT({K(1), K(3), K(8)}), TT({K(1), K(3), K(4)}), TT({K(1), K(3), K(4)})}, {}, 23, 1);
  EXPECT_EQ(InferTypes(m->g).code(), StatusCode::kInvalidArgument);
  m = MakeGraph("RotaryEmbedding", {TT({K(1), K(2), K(3), K(8)}), TT({K(1), K(3), K(4)}), TT({K(1), K(3), K(4)})},
                {{"rotary_embedding_dim", ir::Attribute::Int(3)}}, 23, 1);
  EXPECT_EQ(InferTypes(m->g).code(), StatusCode::kInvalidArgument);
}

// 3-D GQA + past + causal against a naive reference loop.
TEST(OnnxAttentionRun, GqaPastCausal3d) {
  const int64_t B = 2, Hq = 4, Hkv = 2, Sq = 3, Skv = 3, P = 2, D = 4, Dv = 5, T = P + Skv;
  Tensor q = Random({B, Sq, Hq * D}, 1), k = Random({B, Skv, Hkv * D}, 2), v = Random({B, Skv, Hkv * Dv}, 3);
  Tensor pk = Random({B, Hkv, P, D}, 4), pv = Random({B, Hkv, P, Dv}, 5);
  std::map<std::string, ir::Attribute> attrs = {{"q_num_heads", ir::Attribute::Int(Hq)},
                                                {"kv_num_heads", ir::Attribute::Int(Hkv)},
                                                {"is_causal", ir::Attribute::Int(1)}};
  std::vector<const Tensor*> ins = {&q, &k, &v, nullptr, &pk, &pv};
  std::vector<TensorType> types;
  for (const Tensor* t : ins) types.push_back(t ? TensorType::Static(t->dtype(), t->shape()) : TensorType{});
  auto m = MakeGraph("Attention", types, attrs, 23, 3);
  std::vector<Tensor> outs;
  ASSERT_TRUE(RunNode(*m->node, 23, ins, &outs).ok());
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[0].shape(), (Shape{B, Sq, Hq * Dv}));
  EXPECT_EQ(outs[1].shape(), (Shape{B, Hkv, T, D}));
  auto KAt = [&](int64_t b, int64_t h, int64_t t, int64_t c) {
    return t < P ? pk.data<float>()[((b * Hkv + h) * P + t) * D + c]
                 : k.data<float>()[(b * Skv + (t - P)) * Hkv * D + h * D + c];
  };
  auto VAt = [&](int64_t b, int64_t h, int64_t t, int64_t c) {
    return t < P ? pv.data<float>()[((b * Hkv + h) * P + t) * Dv + c]
                 : v.data<float>()[(b * Skv + (t - P)) * Hkv * Dv + h * Dv + c];
  };
  const float* y = outs[0].data<float>();
  const float* present_k = outs[1].data<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t hk = h / (Hq / Hkv);
        std::vector<double> p(T, 0.0);
        double mx = -1e30, sum = 0;
        for (int64_t j = 0; j <= i + P; ++j) {
          double s = 0;
          for (int64_t c = 0; c < D; ++c) s += q.data<float>()[(b * Sq + i) * Hq * D + h * D + c] * KAt(b, hk, j, c);
          s /= std::sqrt(double(D));
          p[j] = s;
          mx = std::max(mx, p[j]);
        }
        for (int64_t j = 0; j <= i + P; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int64_t c = 0; c < Dv; ++c) {
          double acc = 0;
          for (int64_t j = 0; j <= i + P; ++j) acc += p[j] / sum * VAt(b, hk, j, c);
          EXPECT_NEAR(y[(b * Sq + i) * Hq * Dv + h * Dv + c], acc, 1e-5) << b << "," << h << "," << i << "," << c;
        }
      }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hkv; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < D; ++c) EXPECT_EQ(present_k[((b * Hkv + h) * T + t) * D + c], KAt(b, h, t, c));
}

// Partial interleaved rotation on a 3-D input with position ids.
TEST(OnnxAttentionRun, RotaryInterleavedPartial) {
  const int64_t B = 1, S = 2, H = 2, hd = 6, rd = 4;
  Tensor x = Random({B, S, H * hd}, 7);
  Tensor cosc = Random({5, rd / 2}, 8), sinc = Random({5, rd / 2}, 9);
  Tensor pos = Tensor::FromVector<int64_t>(DType::kInt64, {3, 1}, {B, S});
  std::vector<const Tensor*> ins = {&x, &cosc, &sinc, &pos};
  std::vector<TensorType> types;
  for (const Tensor* t : ins) types.push_back(TensorType::Static(t->dtype(), t->shape()));
  auto m = MakeGraph("RotaryEmbedding", types,
                     {{"interleaved", ir::Attribute::Int(1)}, {"rotary_embedding_dim", ir::Attribute::Int(rd)},
                      {"num_heads", ir::Attribute::Int(H)}},
                     23, 1);
  std::vector<Tensor> outs;
  ASSERT_TRUE(RunNode(*m->node, 23, ins, &outs).ok());
  const float* px = x.data<float>();
  const float* py = outs[0].data<float>();
  for (int64_t s = 0; s < S; ++s) {
    const int64_t p = pos.data<int64_t>()[s];
    for (int64_t h = 0; h < H; ++h) {
      const int64_t off = s * H * hd + h * hd;
      for (int64_t i = 0; i < rd / 2; ++i) {
        const float c = cosc.data<float>()[p * 2 + i], sn = sinc.data<float>()[p * 2 + i];
        const float x1 = px[off + 2 * i], x2 = px[off + 2 * i + 1];
        EXPECT_NEAR(py[off + 2 * i], c * x1 - sn * x2, 1e-6);
        EXPECT_NEAR(py[off + 2 * i + 1], sn * x1 + c * x2, 1e-6);
      }
      for (int64_t i = rd; i < hd; ++i) EXPECT_EQ(py[off + i], px[off + i]);
    }
  }
}

}  // namespace
}  // namespace sampan::ops
