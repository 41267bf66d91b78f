// sampan::Attention's reference kernel: layout="bshd" ([B, S, H, D] operands) gives
// what the default layout gives on the transposed tensors, and inference of the
// layout (shapes, errors).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "ir/text.h"
#include "ops/op_test_util.h"
#include "ops/run_node.h"
#include "passes/pass_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

std::unique_ptr<OneNode> AttentionGraph(const std::vector<ir::TensorType>& in, const std::string& layout, int64_t kt) {
  std::map<std::string, ir::Attribute> attrs = {{"scale", ir::Attribute::Float(0.3f)},
                                                {"k_transposed", ir::Attribute::Int(kt)}};
  if (!layout.empty()) attrs["layout"] = ir::Attribute::String(layout);
  auto m = MakeGraph("Attention", in, attrs, 17, 1);
  m->node->domain = "sampan";
  m->g.opsets["sampan"] = 1;
  return m;
}

// Swaps dims 1 and 2 of a rank-4 f32 tensor ([B, H, S, D] <-> [B, S, H, D]).
Tensor SwapSH(const Tensor& t) {
  const Shape s = t.shape();
  Tensor out = Tensor::Alloc(DType::kFloat32, {s[0], s[2], s[1], s[3]});
  for (int64_t a = 0; a < s[0]; ++a)
    for (int64_t b = 0; b < s[1]; ++b)
      for (int64_t c = 0; c < s[2]; ++c)
        for (int64_t d = 0; d < s[3]; ++d)
          out.mutable_data<float>()[((a * s[2] + c) * s[1] + b) * s[3] + d] =
              t.data<float>()[((a * s[1] + b) * s[2] + c) * s[3] + d];
  return out;
}

TEST(SampanAttention, BshdMatchesBhsdOnTransposedOperands) {
  // B=2, H=3, Sq=5, Sk=7, D=8, Dv=4; the mask masks every key of (b=1, row 2).
  const Tensor q = Random({2, 3, 5, 8}, 1), k = Random({2, 3, 7, 8}, 2), v = Random({2, 3, 7, 4}, 3);
  Tensor mask = Random({2, 1, 5, 7}, 4);
  for (int64_t j = 0; j < 7; ++j)
    mask.mutable_data<float>()[(1 * 5 + 2) * 7 + j] = -std::numeric_limits<float>::infinity();
  auto bhsd = AttentionGraph({TT({K(2), K(3), K(5), K(8)}), TT({K(2), K(3), K(7), K(8)}), TT({K(2), K(3), K(7), K(4)}),
                              TT({K(2), K(1), K(5), K(7)})},
                             "", 0);
  auto bshd = AttentionGraph({TT({K(2), K(5), K(3), K(8)}), TT({K(2), K(7), K(3), K(8)}), TT({K(2), K(7), K(3), K(4)}),
                              TT({K(2), K(1), K(5), K(7)})},
                             "bshd", 0);
  std::vector<Tensor> want, got;
  ASSERT_TRUE(RunNode(*bhsd->node, 17, {&q, &k, &v, &mask}, &want).ok());
  const Tensor qt = SwapSH(q), kt = SwapSH(k), vt = SwapSH(v);
  Status st = RunNode(*bshd->node, 17, {&qt, &kt, &vt, &mask}, &got);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(got[0].shape(), (Shape{2, 5, 3, 4}));
  const Tensor back = SwapSH(got[0]);
  for (int64_t i = 0; i < back.numel(); ++i)
    EXPECT_NEAR(back.data<float>()[i], want[0].data<float>()[i], 1e-6) << "element " << i;
  // The fully masked row gives zeros.
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(want[0].data<float>()[((1 * 3 + h) * 5 + 2) * 4 + c], 0.f);
}

TEST(SampanAttention, BshdInfersBshdOutput) {
  auto m = AttentionGraph(
      {TT({S("B"), S("S"), K(12), K(64)}), TT({S("B"), S("T"), K(12), K(64)}), TT({S("B"), S("T"), K(12), K(32)})},
      "bshd", 0);
  ASSERT_TRUE(InferTypes(m->g).ok());
  EXPECT_EQ(m->g.FindValue("out0")->type.ToString(), TT({S("B"), S("S"), K(12), K(32)}).ToString());
}

TEST(SampanAttention, BshdErrors) {
  const std::vector<ir::TensorType> four = {TT({K(1), K(4), K(2), K(8)}), TT({K(1), K(4), K(2), K(8)}),
                                            TT({K(1), K(4), K(2), K(8)})};
  for (const auto& [layout, kt, what] : std::vector<std::tuple<std::string, int64_t, std::string>>{
           {"bshd", 1, "k_transposed"}, {"sbhd", 0, "layout must be"}}) {
    auto m = AttentionGraph(four, layout, kt);
    Status st = InferTypes(m->g);
    ASSERT_FALSE(st.ok()) << layout;
    EXPECT_NE(st.message().find(what), std::string::npos) << st.ToString();
  }
  auto r3 = AttentionGraph({TT({K(4), K(2), K(8)}), TT({K(4), K(2), K(8)}), TT({K(4), K(2), K(8)})}, "bshd", 0);
  Status st = InferTypes(r3->g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("rank-4"), std::string::npos) << st.ToString();
  auto heads = AttentionGraph(
      {TT({K(1), K(4), K(2), K(8)}), TT({K(1), K(4), K(3), K(8)}), TT({K(1), K(4), K(3), K(8)})}, "bshd", 0);
  st = InferTypes(heads->g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("leading dims"), std::string::npos) << st.ToString();
}

// Part `part` (0 = Q, 1 = K, 2 = V) of a packed [B, S, 3, H, D] f32 tensor, as [B, S, H, D].
Tensor Unpack(const Tensor& p, int64_t part) {
  const Shape s = p.shape();
  Tensor out = Tensor::Alloc(DType::kFloat32, {s[0], s[1], s[3], s[4]});
  for (int64_t bs = 0; bs < s[0] * s[1]; ++bs)
    for (int64_t hd = 0; hd < s[3] * s[4]; ++hd)
      out.mutable_data<float>()[bs * s[3] * s[4] + hd] = p.data<float>()[(bs * 3 + part) * s[3] * s[4] + hd];
  return out;
}

TEST(SampanAttention, PackedQkvMatchesBshdOnItsParts) {
  // B=2, S=5, H=3, D=8, a per-row mask.
  const Tensor packed = Random({2, 5, 3, 3, 8}, 11), mask = Random({2, 1, 5, 5}, 12);
  auto g = passes::testing::MustParse(R"(
    opset 17
    opset sampan 1
    graph g (p: f32[2,5,3,3,8], m: f32[2,1,5,5]) -> (y) {
      y = sampan::Attention(p, _, _, m) {layout="bs3hd", scale=0.3}
    })");
  auto bshd = AttentionGraph({TT({K(2), K(5), K(3), K(8)}), TT({K(2), K(5), K(3), K(8)}), TT({K(2), K(5), K(3), K(8)}),
                              TT({K(2), K(1), K(5), K(5)})},
                             "bshd", 0);
  std::vector<Tensor> want, got;
  const Tensor q = Unpack(packed, 0), k = Unpack(packed, 1), v = Unpack(packed, 2);
  ASSERT_TRUE(RunNode(*bshd->node, 17, {&q, &k, &v, &mask}, &want).ok());
  Status st = RunNode(*g->nodes()[0], 17, {&packed, nullptr, nullptr, &mask}, &got);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(got[0].shape(), (Shape{2, 5, 3, 8}));
  EXPECT_EQ(g->outputs()[0]->type.ToString(), TT({K(2), K(5), K(3), K(8)}).ToString());
  for (int64_t i = 0; i < want[0].numel(); ++i)
    EXPECT_NEAR(got[0].data<float>()[i], want[0].data<float>()[i], 1e-6) << "element " << i;
}

TEST(SampanAttention, PackedQkvErrors) {
  for (const auto& [graph, what] : std::vector<std::pair<std::string, std::string>>{
           {"y = sampan::Attention(p, p, _) {layout=\"bs3hd\"}", "must be absent"},
           {"y = sampan::Attention(r) {layout=\"bs3hd\"}", "rank-5"},
           {"y = sampan::Attention(w) {layout=\"bs3hd\"}", "must be 3"},
           {"y = sampan::Attention(p) {layout=\"bs3hd\", k_transposed=1}", "k_transposed"},
           {"y = sampan::Attention(p) {layout=\"bshd\"}", "inputs 0, 1 and 2"}}) {
    auto g = ir::ParseGraph(
        "opset 17\nopset sampan 1\ngraph g (p: f32[1,4,3,2,8], r: f32[4,3,2,8], w: f32[1,4,2,2,8]) -> (y) {\n  " +
        graph + "\n}\n");
    ASSERT_TRUE(g.ok()) << graph << ": " << g.status().ToString();
    Status st = InferTypes(**g);
    ASSERT_FALSE(st.ok()) << graph;
    EXPECT_NE(st.message().find(what), std::string::npos) << st.ToString();
  }
}

// With YScale (input 4) the output is QuantizeLinear of the attention as rounded to its type,
// bit for bit: f16 and f32 operands, e4m3fn and e5m2, saturating or not, with a mask, bshd
// layout; inference gives the float8 type and refuses a scale of several values.
TEST(SampanAttention, QuantizedOutputIsQuantizeLinearOfTheAttention) {
  struct Case {
    const char* type;
    int out;  // output_dtype
    int saturate;
    const char* scale;
  };
  for (const Case& c : {Case{"f16", 17, 1, "const f16[] {0.004}"}, Case{"f16", 19, 0, "const f32[] {0.5}"},
                        Case{"f32", 17, 0, "const f32[] {0.0009765625}"}, Case{"f32", 19, 1, "const f32[1] {0.01}"}}) {
    const std::string t = c.type;
    const std::string head =
        StrCat("opset 21\nopset sampan 1\ngraph g (q: ", t, "[2,5,2,8], k: ", t, "[2,6,2,8], v: ", t,
               "[2,6,2,8], m: ", t, "[2,1,5,6]) -> (y) {\n  ys = ", c.scale, "\n");
    const std::string attrs = StrCat("scale=0.35, layout=\"bshd\"");
    const std::string fused = StrCat(head, "  y = sampan::Attention(q, k, v, m, ys) {", attrs, ", output_dtype=", c.out,
                                     ", saturate=", c.saturate, "}\n}\n");
    const std::string plain =
        StrCat(head, "  a = sampan::Attention(q, k, v, m) {", attrs, "}\n",
               "  y = sampan::QuantizeLinear(a, ys) {output_dtype=", c.out, ", saturate=", c.saturate, "}\n}\n");
    auto before = passes::testing::MustParse(plain);
    auto inputs = passes::testing::RandomInputs(*before, 21);
    // Large values too, so that the unsaturated conversions meet values past float8's range.
    for (auto& [name, tensor] : inputs)
      if (name == "v")
        for (int64_t i = 0; i < tensor.numel(); i += 7) {
          Tensor big =
              *CastTensor(Tensor::FromVector(DType::kFloat32, std::vector<float>{900.f}, Shape{}), tensor.dtype());
          std::memcpy(static_cast<char*>(tensor.mutable_raw()) + i * DTypeSize(tensor.dtype()), big.raw(),
                      DTypeSize(tensor.dtype()));
        }
    auto want = passes::testing::RunReference(std::move(before), inputs);
    auto got = passes::testing::RunReference(passes::testing::MustParse(fused), inputs);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ((*got)[0].dtype(), c.out == 17 ? DType::kFloat8E4M3FN : DType::kFloat8E5M2);
    ASSERT_EQ((*got)[0].shape(), (Shape{2, 5, 2, 8}));
    ASSERT_EQ((*got)[0].nbytes(), (*want)[0].nbytes());
    EXPECT_EQ(0, std::memcmp((*got)[0].raw(), (*want)[0].raw(), (*want)[0].nbytes())) << t << " output_dtype " << c.out;
  }
  auto infer = [](const std::string& body) {
    auto g =
        ir::ParseGraph(StrCat("opset 21\nopset sampan 1\ngraph g (q: f16[1,4,8], k: f16[1,4,8], v: f16[1,4,8]) -> "
                              "(y) {\n",
                              body, "\n}\n"));
    return g.ok() ? ops::InferTypes(**g) : g.status();
  };
  EXPECT_TRUE(infer("ys = const f16[] {0.1}\ny = sampan::Attention(q, k, v, _, ys) {output_dtype=17}").ok());
  const Status axis = infer("ys = const f16[2] {0.1, 0.2}\ny = sampan::Attention(q, k, v, _, ys) {output_dtype=17}");
  EXPECT_FALSE(axis.ok());
  EXPECT_NE(axis.message().find("one value"), std::string::npos) << axis.ToString();
  const Status type = infer("ys = const f16[] {0.1}\ny = sampan::Attention(q, k, v, _, ys) {output_dtype=1}");
  EXPECT_FALSE(type.ok()) << "a float output_dtype is not a quantized type";
}

}  // namespace
}  // namespace sampan::ops
