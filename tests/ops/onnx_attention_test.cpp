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
  auto m =
      MakeGraph("Attention",
                {TT({S("B"), K(4), S("L"), K(8)}), TT({S("B"), K(2), S("L"), K(8)}), TT({S("B"), K(2), S("L"), K(6)}),
                 TensorType{}, TT({S("B"), K(2), K(5), K(8)}), TT({S("B"), K(2), K(5), K(6)})},
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
  auto m3 =
      MakeGraph("Attention", {TT({S("B"), S("L"), K(32)}), TT({S("B"), S("M"), K(16)}), TT({S("B"), S("M"), K(12)})},
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
  // softcap with a causal mask: supported (softcap comes before the mask since the onnx 1.23 errata).
  m = MakeGraph("Attention", {TT({K(1), K(2), K(2), K(4)}), TT({K(1), K(2), K(2), K(4)}), TT({K(1), K(2), K(2), K(4)})},
                {{"softcap", ir::Attribute::Float(2.f)}, {"is_causal", ir::Attribute::Int(1)}}, 23, 1);
  EXPECT_TRUE(InferTypes(m->g).ok());
  // Opset 25 window sizes below -1.
  m = MakeGraph("Attention", {TT({K(1), K(2), K(2), K(4)}), TT({K(1), K(2), K(2), K(4)}), TT({K(1), K(2), K(2), K(4)})},
                {{"left_window_size", ir::Attribute::Int(-2)}}, 25, 1);
  EXPECT_EQ(InferTypes(m->g).code(), StatusCode::kInvalidArgument);
  // nonpad_kv_seqlen (external cache) with past_key/past_value (internal cache).
  m = MakeGraph("Attention",
                {TT({K(1), K(2), K(2), K(4)}), TT({K(1), K(2), K(2), K(4)}), TT({K(1), K(2), K(2), K(4)}), TensorType{},
                 TT({K(1), K(2), K(3), K(4)}), TT({K(1), K(2), K(3), K(4)}), TT({K(1)}, DType::kInt64)},
                {}, 24, 1);
  EXPECT_EQ(InferTypes(m->g).code(), StatusCode::kInvalidArgument);
  // An unknown softmax_precision.
  m = MakeGraph("Attention", {TT({K(1), K(2), K(2), K(4)}), TT({K(1), K(2), K(2), K(4)}), TT({K(1), K(2), K(2), K(4)})},
                {{"softmax_precision", ir::Attribute::Int(7)}}, 23, 1);
  EXPECT_EQ(InferTypes(m->g).code(), StatusCode::kInvalidArgument);
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
                     {{"interleaved", ir::Attribute::Int(1)},
                      {"rotary_embedding_dim", ir::Attribute::Int(rd)},
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

// ---- Semantics of the onnx 1.23 reference (Attention-23/24 errata, opset 25 windows) ----

// Runs one Attention node; inputs in ONNX order (nullptr = omitted).
std::vector<Tensor> RunAttention(const std::vector<const Tensor*>& ins, std::map<std::string, ir::Attribute> attrs,
                                 int64_t opset, size_t n_out) {
  std::vector<TensorType> types;
  for (const Tensor* t : ins) types.push_back(t ? TensorType::Static(t->dtype(), t->shape()) : TensorType{});
  auto m = MakeGraph("Attention", types, std::move(attrs), opset, n_out);
  std::vector<Tensor> outs;
  Status st = RunNode(*m->node, opset, ins, &outs);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return outs;
}

// Naive 4-D float attention in double: bias(b, h, i, j) is added to the
// (softcapped) score, -inf excludes the key; a row with every key excluded is 0.
template <class Bias>
std::vector<double> NaiveAttention(const Tensor& q, const Tensor& k, const Tensor& v, double softcap, Bias&& bias) {
  const int64_t B = q.dim(0), Hq = q.dim(1), Sq = q.dim(2), D = q.dim(3);
  const int64_t Hkv = k.dim(1), T = k.dim(2), Dv = v.dim(3);
  std::vector<double> y(static_cast<size_t>(B * Hq * Sq * Dv), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t hk = h / (Hq / Hkv);
        std::vector<double> p(static_cast<size_t>(T));
        double mx = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          double s = 0;
          for (int64_t c = 0; c < D; ++c)
            s += double(q.data<float>()[((b * Hq + h) * Sq + i) * D + c]) *
                 k.data<float>()[((b * Hkv + hk) * T + j) * D + c];
          s /= std::sqrt(double(D));
          if (softcap > 0) s = softcap * std::tanh(s / softcap);
          p[j] = s + bias(b, h, i, j);
          mx = std::max(mx, p[j]);
        }
        if (mx == -INFINITY) continue;
        double sum = 0;
        for (double& x : p) sum += (x = std::exp(x - mx));
        for (int64_t c = 0; c < Dv; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < T; ++j) acc += p[j] / sum * v.data<float>()[((b * Hkv + hk) * T + j) * Dv + c];
          y[((b * Hq + h) * Sq + i) * Dv + c] = acc;
        }
      }
  return y;
}

void ExpectNear(const Tensor& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got.data<float>()[i], want[i], tol) << what << " at " << i;
}

// A query row whose keys are all masked gives 0 (Y and the mode-3 probabilities), not NaN.
TEST(OnnxAttentionRun, FullyMaskedRowIsZero) {
  Tensor q = Random({1, 2, 2, 4}, 11), k = Random({1, 2, 2, 4}, 12), v = Random({1, 2, 2, 4}, 13);
  Tensor mask = Tensor::FromVector<int>(DType::kBool, {0, 0, 1, 1}, {2, 2});
  auto outs = RunAttention({&q, &k, &v, &mask}, {{"qk_matmul_output_mode", ir::Attribute::Int(3)}}, 23, 4);
  ASSERT_EQ(outs.size(), 4u);
  auto bias = [&](int64_t, int64_t, int64_t i, int64_t) { return i == 0 ? -INFINITY : 0.0; };
  ExpectNear(outs[0], NaiveAttention(q, k, v, 0, bias), 1e-5, "Y");
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t j = 0; j < 2; ++j) {
      EXPECT_EQ(outs[3].data<float>()[(h * 2 + 0) * 2 + j], 0.f);
      EXPECT_NEAR(outs[3].data<float>()[(h * 2 + 1) * 2 + 0] + outs[3].data<float>()[(h * 2 + 1) * 2 + 1], 1.f, 1e-6);
    }
}

// With an external cache, causal masking is bottom-right aligned: query i sees
// key j iff j <= i + nonpad_kv_seqlen[b] - Sq (a negative offset empties rows).
TEST(OnnxAttentionRun, CausalNonpadIsBottomRightAligned) {
  const int64_t B = 3, H = 2, Sq = 3, T = 6, D = 4;
  Tensor q = Random({B, H, Sq, D}, 21), k = Random({B, H, T, D}, 22), v = Random({B, H, T, D}, 23);
  const std::vector<int64_t> valid = {6, 4, 2};
  Tensor nonpad = Tensor::FromVector<int64_t>(DType::kInt64, valid, {B});
  auto outs =
      RunAttention({&q, &k, &v, nullptr, nullptr, nullptr, &nonpad}, {{"is_causal", ir::Attribute::Int(1)}}, 24, 1);
  ASSERT_EQ(outs.size(), 1u);
  auto bias = [&](int64_t b, int64_t, int64_t i, int64_t j) {
    return j < valid[b] && j <= i + valid[b] - Sq ? 0.0 : -INFINITY;
  };
  ExpectNear(outs[0], NaiveAttention(q, k, v, 0, bias), 1e-5, "Y");
  // Batch 2 has offset -1: query 0 sees no key.
  for (int64_t c = 0; c < D; ++c) EXPECT_EQ(outs[0].data<float>()[((2 * H + 0) * Sq + 0) * D + c], 0.f);
}

// GQA decode step over an external cache: the one query sees every valid key.
TEST(OnnxAttentionRun, GqaCausalNonpadDecode) {
  const int64_t B = 2, Hq = 4, Hkv = 2, T = 8, D = 4;
  Tensor q = Random({B, Hq, 1, D}, 31), k = Random({B, Hkv, T, D}, 32), v = Random({B, Hkv, T, D}, 33);
  const std::vector<int64_t> valid = {5, 8};
  Tensor nonpad = Tensor::FromVector<int64_t>(DType::kInt64, valid, {B});
  auto outs =
      RunAttention({&q, &k, &v, nullptr, nullptr, nullptr, &nonpad}, {{"is_causal", ir::Attribute::Int(1)}}, 24, 1);
  ASSERT_EQ(outs.size(), 1u);
  auto bias = [&](int64_t b, int64_t, int64_t, int64_t j) { return j < valid[b] ? 0.0 : -INFINITY; };
  ExpectNear(outs[0], NaiveAttention(q, k, v, 0, bias), 1e-5, "Y");
}

// softcap applies to the raw scores, before the mask: -inf keys stay excluded
// (V holds 1000 there, so a leak would show), also with is_causal and a bool
// mask. qk_matmul_output mode 1 is the softcapped score, mode 2 adds the mask.
TEST(OnnxAttentionRun, SoftcapBeforeMask) {
  const int64_t Sq = 4, T = 6, D = 8;
  Tensor q = Random({1, 1, Sq, D}, 41), k = Random({1, 1, T, D}, 42), v = Random({1, 1, T, D}, 43);
  for (int64_t j = 4; j < T; ++j)
    for (int64_t c = 0; c < D; ++c) v.mutable_data<float>()[j * D + c] = 1000.f;
  std::vector<float> mvals(static_cast<size_t>(Sq * T), 0.f);
  for (int64_t i = 0; i < Sq; ++i) mvals[i * T + 4] = mvals[i * T + 5] = -INFINITY;
  Tensor mask = Tensor::FromVector<float>(DType::kFloat32, mvals, {Sq, T});
  const float cap = 0.5f;
  auto excluded = [&](int64_t, int64_t, int64_t, int64_t j) { return j >= 4 ? -INFINITY : 0.0; };
  for (int64_t mode : {1, 2}) {
    auto outs = RunAttention(
        {&q, &k, &v, &mask},
        {{"softcap", ir::Attribute::Float(cap)}, {"qk_matmul_output_mode", ir::Attribute::Int(mode)}}, 23, 4);
    ASSERT_EQ(outs.size(), 4u);
    ExpectNear(outs[0], NaiveAttention(q, k, v, cap, excluded), 1e-5, "Y");
    for (int64_t i = 0; i < Sq; ++i)
      for (int64_t j = 0; j < T; ++j) {
        double s = 0;
        for (int64_t c = 0; c < D; ++c) s += double(q.data<float>()[i * D + c]) * k.data<float>()[j * D + c];
        const double capped = cap * std::tanh(s / std::sqrt(double(D)) / cap);
        const float got = outs[3].data<float>()[i * T + j];
        if (mode == 2 && j >= 4)
          EXPECT_EQ(got, -INFINITY);
        else
          EXPECT_NEAR(got, capped, 1e-5) << "mode " << mode << " " << i << "," << j;
      }
  }
  // is_causal plus a bool mask excluding key 0 (both used to be refused with softcap).
  std::vector<int> bvals(static_cast<size_t>(Sq * T), 1);
  for (int64_t i = 0; i < Sq; ++i) bvals[i * T] = 0;
  Tensor bmask = Tensor::FromVector<int>(DType::kBool, bvals, {Sq, T});
  auto outs = RunAttention({&q, &k, &v, &bmask},
                           {{"softcap", ir::Attribute::Float(cap)}, {"is_causal", ir::Attribute::Int(1)}}, 23, 1);
  ASSERT_EQ(outs.size(), 1u);
  auto causal = [&](int64_t, int64_t, int64_t i, int64_t j) { return j == 0 || j > i ? -INFINITY : 0.0; };
  ExpectNear(outs[0], NaiveAttention(q, k, v, cap, causal), 1e-5, "causal Y");
  for (int64_t c = 0; c < D; ++c) EXPECT_EQ(outs[0].data<float>()[c], 0.f);  // query 0: key 0 only, masked
}

// Opset 25 sliding window, positions offset by the past cache: query i (at
// i + P) sees keys in [i + P - left, i + P + right].
TEST(OnnxAttentionRun, SlidingWindowWithPast) {
  const int64_t Sq = 3, Skv = 3, P = 2, D = 4, T = P + Skv;
  Tensor q = Random({1, 2, Sq, D}, 51), k = Random({1, 2, Skv, D}, 52), v = Random({1, 2, Skv, D}, 53);
  Tensor pk = Random({1, 2, P, D}, 54), pv = Random({1, 2, P, D}, 55);
  auto outs =
      RunAttention({&q, &k, &v, nullptr, &pk, &pv},
                   {{"left_window_size", ir::Attribute::Int(2)}, {"right_window_size", ir::Attribute::Int(1)}}, 25, 3);
  ASSERT_EQ(outs.size(), 3u);
  const Tensor& present_k = outs[1];
  const Tensor& present_v = outs[2];
  ASSERT_EQ(present_k.shape(), (Shape{1, 2, T, D}));
  auto window = [&](int64_t, int64_t, int64_t i, int64_t j) {
    return j >= i + P - 2 && j <= i + P + 1 ? 0.0 : -INFINITY;
  };
  ExpectNear(outs[0], NaiveAttention(q, present_k, present_v, 0, window), 1e-5, "Y");
  // Opset 24 has no windows: the same attributes are not read.
  auto full =
      RunAttention({&q, &k, &v, nullptr, &pk, &pv},
                   {{"left_window_size", ir::Attribute::Int(2)}, {"right_window_size", ir::Attribute::Int(1)}}, 24, 1);
  ASSERT_EQ(full.size(), 1u);
  ExpectNear(full[0],
             NaiveAttention(q, present_k, present_v, 0, [](int64_t, int64_t, int64_t, int64_t) { return 0.0; }), 1e-5,
             "Y (opset 24)");
}

// bfloat16 causal attention matches the onnx 1.23.2 reference bit for bit: it
// rounds Q*sqrt(scale), K*sqrt(scale), the scores, exp and the quotient to
// bfloat16 and sums the softmax row in bfloat16. Rounding only the final
// result (the old kernel) differs in 18 of the 48 values.
TEST(OnnxAttentionRun, Bf16CausalMatchesOnnxReferenceBits) {
  const int64_t B = 1, H = 2, Sq = 3, S = 5, D = 8;
  // Multiples of 1/16 in (-1, 1): exact in bfloat16.
  auto fill = [](const Shape& shape, int mul, int mod, double off) {
    Tensor t = Tensor::Alloc(DType::kBFloat16, shape);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.mutable_data<BFloat16>()[i] = BFloat16(static_cast<float>(((i * mul) % mod) / 16.0 - off));
    return t;
  };
  Tensor q = fill({B, H, Sq, D}, 7, 13, 0.375), k = fill({B, H, S, D}, 5, 11, 0.3125),
         v = fill({B, H, S, D}, 3, 17, 0.5);
  // onnx.reference.ops.op_attention._compute_attention(Q, K, V, is_causal=True) on the same bfloat16 inputs.
  const std::vector<uint16_t> want = {0xbf00, 0xbea0, 0xbe00, 0x3d80, 0x3e80, 0x3ee0, 0xbee0, 0xbe80, 0xbe9b, 0xbdea,
                                      0x3d97, 0x3e86, 0xbd0b, 0x3e1e, 0xbe75, 0xbd52, 0xbdb1, 0xbe60, 0xbcfe, 0x3e20,
                                      0xbcae, 0x3e2a, 0xbcc4, 0xbe20, 0xbee0, 0xbe80, 0xbd80, 0x3e00, 0x3ea0, 0x3f00,
                                      0xbec0, 0xbe40, 0xbe6c, 0xbd31, 0x3e14, 0xbe2e, 0x3c8c, 0x3e52, 0xbe2c, 0x3c9e,
                                      0xbc28, 0xbe16, 0x3d28, 0xbe26, 0x3cd4, 0x3e5a, 0x3d56, 0xbdac};
  auto outs = RunAttention({&q, &k, &v}, {{"is_causal", ir::Attribute::Int(1)}}, 23, 1);
  ASSERT_EQ(outs.size(), 1u);
  ASSERT_EQ(outs[0].numel(), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(outs[0].data<BFloat16>()[i].bits, want[i])
        << "at " << i << ": got " << float(outs[0].data<BFloat16>()[i]) << ", want " << BFloat16::ToFloat(want[i]);
}

}  // namespace
}  // namespace sampan::ops
