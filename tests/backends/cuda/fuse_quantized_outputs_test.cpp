// The CUDA backend's FP8 lowering rewrites (backends/cuda/fuse_quantized_outputs.h): a
// float8 QuantizeLinear of a norm's or an attention's output becomes that kernel's own
// output; graphs before/after on the reference executor, bit for bit. Runs without a GPU
// (graph work only).
#include <gtest/gtest.h>

#if SAMPAN_HAVE_CUDA

#include "backends/cuda/fuse_add_layer_norm.h"
#include "backends/cuda/fuse_quantized_outputs.h"
#include "backends/cuda/rewrite_test_util.h"
#include "passes/pass_test_util.h"

namespace sampan::cuda {
namespace {

using passes::testing::OpList;
using testing::ExpectSameOutputs;
using testing::PlanOf;

// FP8 builds: the float8 QuantizeLinear of a norm's output becomes the norm's second output
// (an AddLayerNorm's, and a plain LayerNormalization's as AddLayerNorm without B), in either
// domain; the residual still reads the norm's own output. Bit for bit the same codes.
const char* kNormQuantize = R"(
  opset 21
  graph g (x: f16[2,4,32], r: f16[2,4,32]) -> (yq, eq, y, e) {
    s = Add(x, r) @add
    sc = const f16[32] random
    bi = const f16[32] random
    y = LayerNormalization(s, sc, bi) {axis=-1} @ln
    qs = const f16[] {0.02}
    yq = sampan::QuantizeLinear(y, qs) {output_dtype=17} @q_ln
    e = LayerNormalization(x, sc) {axis=-1} @plain_ln
    es = const f32[] {0.5}
    ez = const f8e5m2[] {0}
    eq = QuantizeLinear(e, es, ez) @q_plain
  }
)";

TEST(CudaFuseNormQuantize, NormsWriteTheirFloat8Copies) {
  plan::Plan p = PlanOf(kNormQuantize);
  ASSERT_TRUE(FuseAddLayerNorm(p).ok());
  auto done = FuseNormQuantize(p);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done->size(), 2u);
  EXPECT_EQ(OpList(*p.graph), "sampan::AddLayerNorm,sampan::AddLayerNorm");
  EXPECT_EQ(p.choices.count("q_ln"), 0u);
  for (const auto& n : p.graph->nodes()) {
    ASSERT_EQ(n->num_outputs(), 2u) << n->Label();
    ASSERT_EQ(n->num_inputs(), 5u) << n->Label();
    if (n->name == "plain_ln") {
      EXPECT_EQ(n->input(1), nullptr) << "a plain LayerNormalization has no B";
      EXPECT_EQ(n->output(1)->type.dtype, DType::kFloat8E5M2);
    } else {
      EXPECT_EQ(n->input(1)->name(), "r");
      EXPECT_EQ(n->output(1)->type.dtype, DType::kFloat8E4M3FN);
    }
  }
  ExpectSameOutputs(kNormQuantize, p, 0.0, 11);
}

TEST(CudaFuseNormQuantize, LeavesWhatTheNormCannotWrite) {
  // Per-channel scales, a norm with statistics, an integer output: all stay QuantizeLinear.
  plan::Plan p = PlanOf(R"(
    opset 21
    graph g (x: f16[3,16]) -> (a, b, c) {
      sc = const f16[16] random
      y, mean = LayerNormalization(x, sc) {axis=-1} @ln_stats
      s1 = const f16[] {0.1}
      a = sampan::QuantizeLinear(y, s1) {output_dtype=17} @q_stats
      y2 = LayerNormalization(x, sc) {axis=-1} @ln
      s16 = const f16[16] random
      b = sampan::QuantizeLinear(y2, s16) {axis=1, output_dtype=17} @q_axis
      c = sampan::QuantizeLinear(y2, s1) {output_dtype=3} @q_int8
    })");
  auto done = FuseNormQuantize(p);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(done->empty()) << (*done)[0];
}

// The quantize of an attention's output, directly (e5m2, an f32 scale and a zero point of 0
// over f16 operands) or through the Reshape that merges the heads (e4m3fn, as BERT's FP8 graph
// has it before the output projection), becomes the attention's YScale input: the attention
// writes float8 and the Reshape carries it; the readers read the same codes.
const char* kAttentionQuantize = R"(
  opset 21
  opset sampan 1
  graph g (q: f16[2,6,2,8], k: f16[2,6,2,8], v: f16[2,6,2,8], m: f16[2,1,1,6]) -> (o1, o2) {
    a = sampan::Attention(q, k, v, m) {scale=0.35, layout="bshd"} @att
    shape = const i64[3] {2, 6, 16}
    r = Reshape(a, shape) @merge
    s1 = const f16[] {0.01}
    aq = sampan::QuantizeLinear(r, s1) {output_dtype=17} @q_att
    o1 = sampan::DequantizeLinear(aq, s1)
    b = sampan::Attention(q, k, v) {scale=0.2, layout="bshd"} @att2
    s2 = const f32[] {0.125}
    z2 = const f8e5m2[] {0}
    bq = QuantizeLinear(b, s2, z2) @q_att2
    o2 = DequantizeLinear(bq, s2)
  }
)";

TEST(CudaFuseAttentionQuantize, AttentionsWriteFloat8) {
  plan::Plan p = PlanOf(kAttentionQuantize);
  auto done = FuseAttentionQuantize(p);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(done->size(), 2u);
  EXPECT_NE((*done)[0].find("through its views"), std::string::npos) << (*done)[0];
  EXPECT_EQ(OpList(*p.graph), "sampan::Attention,sampan::Attention,Reshape,sampan::DequantizeLinear,DequantizeLinear");
  EXPECT_EQ(p.choices.count("q_att"), 0u);
  EXPECT_EQ(p.choices.count("q_att2"), 0u);
  EXPECT_EQ(p.choices.count("att"), 1u);
  for (const auto& n : p.graph->nodes()) {
    if (n->op_type == "Attention") {
      ASSERT_EQ(n->num_inputs(), 5u) << n->Label();
      ASSERT_NE(n->input(4), nullptr);
      EXPECT_EQ(n->output(0)->type.dtype, n->name == "att" ? DType::kFloat8E4M3FN : DType::kFloat8E5M2) << n->Label();
      if (n->name == "att2") {
        EXPECT_EQ(n->input(3), nullptr) << "no mask";
      }
    }
    if (n->op_type == "Reshape") {
      EXPECT_EQ(n->output(0)->type.dtype, DType::kFloat8E4M3FN);
    }
  }
  ExpectSameOutputs(kAttentionQuantize, p, 0.0, 13);
}

TEST(CudaFuseAttentionQuantize, LeavesWhatTheAttentionCannotWrite) {
  // An attention output read twice, a view read twice, a per-axis scale, an int8 output, a scale
  // that rounds to 0 in its f16 quotient type and a quantized graph output: all stay QuantizeLinear.
  plan::Plan p = PlanOf(R"(
    opset 21
    opset sampan 1
    graph g (q: f16[1,4,2,8], k: f16[1,4,2,8], v: f16[1,4,2,8]) -> (o1, o2, o3, o4, o5, o6, o7) {
      s = const f16[] {0.05}
      a = sampan::Attention(q, k, v) {layout="bshd"} @two_readers
      aq = sampan::QuantizeLinear(a, s) {output_dtype=17}
      o1 = sampan::DequantizeLinear(aq, s)
      o2 = Relu(a)
      shape = const i64[3] {1, 4, 16}
      b = sampan::Attention(q, k, v) {layout="bshd"} @view_two_readers
      r = Reshape(b, shape)
      bq = sampan::QuantizeLinear(r, s) {output_dtype=17}
      o3 = sampan::DequantizeLinear(bq, s)
      o4 = Relu(r)
      c = sampan::Attention(q, k, v) {layout="bshd"} @per_axis
      s8 = const f16[8] {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.2}
      cq = sampan::QuantizeLinear(c, s8) {axis=3, output_dtype=17}
      o5 = sampan::DequantizeLinear(cq, s8) {axis=3}
      d = sampan::Attention(q, k, v) {layout="bshd"} @int8
      dq = sampan::QuantizeLinear(d, s) {output_dtype=3}
      o6 = sampan::DequantizeLinear(dq, s)
      e = sampan::Attention(q, k, v) {layout="bshd"} @tiny_scale
      st = const f32[] {1e-8}
      eq = sampan::QuantizeLinear(e, st) {output_dtype=17, precision=10}
      o7 = sampan::DequantizeLinear(eq, st)
    })");
  auto done = FuseAttentionQuantize(p);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(done->empty()) << (*done)[0];
  plan::Plan out = PlanOf(R"(
    opset 21
    opset sampan 1
    graph g (q: f16[1,4,2,8], k: f16[1,4,2,8], v: f16[1,4,2,8]) -> (aq) {
      s = const f16[] {0.05}
      a = sampan::Attention(q, k, v) {layout="bshd"}
      aq = sampan::QuantizeLinear(a, s) {output_dtype=17}
    })");
  done = FuseAttentionQuantize(out);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(done->empty()) << "a graph output keeps its name";
}

}  // namespace
}  // namespace sampan::cuda

#endif  // SAMPAN_HAVE_CUDA
