// fuse_quantized: Q/DQ around Conv/MatMul/Gemm (and their fused forms) -> sampan::QConv /
// sampan::QMatMul; QLinearConv/QLinearMatMul -> the same; weight DequantizeLinear kept by
// constant_folding for it, and the ones it does not take folded afterwards.
#include <map>

#include "base/small_types.h"
#include "ops/op.h"
#include "passes/pass_test_util.h"

namespace sampan::passes::testing {
namespace {

// onnxruntime's QDQ form of Conv + Relu (Relu removed, the output Q's range starts at 0), a
// residual Add in float between Q/DQ pairs, and a Gemm with a transposed weight.
const char* kQdq = R"(
  opset 17
  graph g (x: f32[1,3,8,8]) -> (y) {
    xs = const f32[] {0.02}
    xz = const u8[] {128}
    xq = QuantizeLinear(x, xs, xz) @qx
    xd = DequantizeLinear(xq, xs, xz) @dqx
    w1q = const i8[8,3,3,3] random
    w1s = const f32[8] {0.1, 0.2, 0.1, 0.2, 0.1, 0.2, 0.1, 0.2}
    w1z = const i8[8] {0}
    w1 = DequantizeLinear(w1q, w1s, w1z) {axis=0} @dqw1
    b1 = const f32[8] random
    c1 = Conv(xd, w1, b1) {pads=[1, 1, 1, 1]} @conv1
    r1 = Relu(c1) @relu1
    s1 = const f32[] {0.05}
    z1 = const u8[] {0}
    q1 = QuantizeLinear(r1, s1, z1) @q1
    d1 = DequantizeLinear(q1, s1, z1) @dq1
    w2q = const i8[8,8,1,1] random
    w2s = const f32[] {0.3}
    w2 = DequantizeLinear(w2q, w2s) @dqw2
    c2 = Conv(d1, w2) @conv2
    a = Add(c2, d1) @add
    s2 = const f32[] {0.1}
    z2 = const u8[] {100}
    q2 = QuantizeLinear(a, s2, z2) @q2
    d2 = DequantizeLinear(q2, s2, z2) @dq2
    p = GlobalAveragePool(d2) @gap
    f = Flatten(p) @flat
    s3 = const f32[] {0.1}
    z3 = const u8[] {100}
    q3 = QuantizeLinear(f, s3, z3) @q3
    d3 = DequantizeLinear(q3, s3, z3) @dq3
    wfq = const i8[5,8] random
    wfs = const f32[5] {0.5, 0.25, 0.5, 0.25, 0.5}
    wf = DequantizeLinear(wfq, wfs) {axis=0} @dqwf
    bf = const f32[5] random
    y = Gemm(d3, wf, bf) {transB=1} @fc
  })";

const std::set<std::string> kPasses = {"constant_folding", "fuse_activation", "fuse_quantized"};

TEST(FuseQuantized, QdqProductsBecomeIntegerNodes) {
  PassRun run;
  auto g = MustParse(kQdq);
  run = RunPasses(*g, kPasses);
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  const ir::Node* conv1 = nullptr;
  const ir::Node* conv2 = nullptr;
  const ir::Node* fc = nullptr;
  for (const auto& n : g->nodes()) {
    if (n->name == "conv1") conv1 = n.get();
    if (n->name == "conv2") conv2 = n.get();
    if (n->name == "fc") fc = n.get();
  }
  ASSERT_TRUE(conv1 && conv2 && fc) << Structure(*g);
  // conv1: Relu fused, output Q taken in (u8 out).
  EXPECT_EQ(conv1->op_type, "QConv");
  EXPECT_EQ(conv1->attr_string("activation", ""), "Relu");
  EXPECT_EQ(conv1->output(0)->type.dtype, DType::kUInt8);
  EXPECT_EQ(conv1->input(0)->name(), "xq");
  EXPECT_EQ(conv1->input(3)->name(), "w1q");
  // conv2: its output feeds the float Add, so it stays float; per-tensor weight scale.
  EXPECT_EQ(conv2->op_type, "QConv");
  EXPECT_EQ(conv2->output(0)->type.dtype, DType::kFloat32);
  EXPECT_EQ(conv2->input(0)->name(), "q1");
  // The Add reads conv2's float output and q1 (through its DequantizeLinear) and is quantized: one
  // sampan::QPointwise reading the float and the integers (QLinearAdd needs both quantized).
  EXPECT_EQ(FindNodeByOp(*g, "Add"), nullptr) << Structure(*g);
  const ir::Node* pw = FindNodeByOp(*g, "QPointwise");
  ASSERT_NE(pw, nullptr) << Structure(*g);
  EXPECT_EQ(pw->input(0), conv2->output(0));
  EXPECT_EQ(pw->input(1)->name(), "q1");
  // fc: Gemm transB=1 -> QMatMul with a [K, N] weight and per-column scale.
  EXPECT_EQ(fc->op_type, "QMatMul");
  EXPECT_EQ(fc->input(3)->data.shape(), (Shape{8, 5}));
  EXPECT_EQ(fc->attr_int("w_axis", 0), 1);
  EXPECT_FALSE(fc->has_attr("transB"));
  // No weight DequantizeLinear is left; the activations' remain where float ops read them.
  for (const auto& n : g->nodes())
    if (n->op_type == "DequantizeLinear") {
      EXPECT_FALSE(n->input(0)->is_constant()) << n->Label();
    }
  bool recorded = false;
  for (const auto& r : run.rewrites)
    recorded |= r.description.find("'conv1' -> QConv (u8 x i8 -> u8)") != std::string::npos;
  EXPECT_TRUE(recorded);
}

TEST(FuseQuantized, SameNumbersAsTheQdqGraph) {
  // The fused nodes compute the Q/DQ graph; only float rounding order differs (one output step
  // at most in a quantized intermediate).
  CheckNumerics(kQdq, kPasses, 2e-2);
}

TEST(FuseQuantized, QLinearConvAndMatMulBecomeTheSameNodes) {
  const char* text = R"(
    opset 13
    graph g (x: u8[1,4,5,5]) -> (y) {
      xs = const f32[] {0.02}
      xz = const u8[] {10}
      wq = const i8[6,4,3,3] random
      ws = const f32[6] {0.1, 0.2, 0.3, 0.1, 0.2, 0.3}
      wz = const i8[6] {0}
      ys = const f32[] {0.05}
      yz = const u8[] {5}
      b = const i32[6] {100, -200, 300, 0, 5, -5}
      c = QLinearConv(x, xs, xz, wq, ws, wz, ys, yz, b) {pads=[1, 1, 1, 1]} @qconv
      r = const i64[2] {5, 30}
      f = Reshape(c, r) @reshape
      mq = const i8[30,7] random
      ms = const f32[] {0.01}
      mz = const i8[] {0}
      y = QLinearMatMul(f, ys, yz, mq, ms, mz, ys, yz) @qmm
    })";
  auto g = MustParse(text);
  PassRun run = RunPasses(*g, {"fuse_quantized"});
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  EXPECT_EQ(OpList(*g), "sampan::QConv,Reshape,sampan::QMatMul");
  const ir::Node* qc = FindNodeByOp(*g, "QConv");
  ASSERT_NE(qc, nullptr);
  // The int32 bias in units of x_scale * w_scale[c] is now float: 100 * 0.02 * 0.1 = 0.2.
  ASSERT_NE(qc->input(6), nullptr);
  EXPECT_FLOAT_EQ(qc->input(6)->data.data<float>()[0], 0.2f);
  EXPECT_FLOAT_EQ(qc->input(6)->data.data<float>()[1], -200 * 0.02f * 0.2f);
  CheckNumerics(text, {"fuse_quantized"}, 0.0);
}

TEST(FuseQuantized, ConstantFoldingKeepsWeightDequantizeOnlyForProducts) {
  const char* text = R"(
    opset 17
    graph g (x: f32[2,4]) -> (y, z) {
      wq = const i8[4,3] random
      ws = const f32[] {0.5}
      w = DequantizeLinear(wq, ws) @dqw
      y = MatMul(x, w) @mm
      oq = const i8[2,4] random
      o = DequantizeLinear(oq, ws) @dqo
      z = Add(x, o) @add
    })";
  auto g = MustParse(text);
  PassRun run = RunPasses(*g, {"constant_folding"});
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  // dqw feeds MatMul's weight: kept (x is float, so fuse_quantized will fold it later);
  // dqo feeds an Add: folded.
  EXPECT_EQ(OpList(*g), "DequantizeLinear,MatMul,Add");
  run = RunPasses(*g, {"fuse_quantized"});
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  EXPECT_EQ(OpList(*g), "MatMul,Add");
  CheckNumerics(text, {"constant_folding", "fuse_quantized"}, 0.0);
}

TEST(FuseQuantized, QuantizedResidualAddBecomesQLinearAdd) {
  const char* text = R"(
    opset 17
    graph g (a: u8[1,4,3,3], b: u8[1,4,3,3]) -> (y) {
      sa = const f32[] {0.1}
      za = const u8[] {10}
      sb = const f32[] {0.2}
      zb = const u8[] {20}
      da = DequantizeLinear(a, sa, za) @dqa
      db = DequantizeLinear(b, sb, zb) @dqb
      s = Add(da, db) @add
      sc = const f32[] {0.15}
      zc = const u8[] {0}
      q = QuantizeLinear(s, sc, zc) @q
      y = DequantizeLinear(q, sc, zc) @dq
    })";
  auto g = MustParse(text);
  PassRun run = RunPasses(*g, {"fuse_quantized"});
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  EXPECT_EQ(OpList(*g), "com.microsoft::QLinearAdd,DequantizeLinear");
  CheckNumerics(text, {"fuse_quantized"}, 0.0);
}

// PaddleOCR's quantized hard-swish block as onnxruntime's quantize_static writes it: a learnable
// per-channel affine (int8 weights through DequantizeLinear), x * relu6(x + 3) / 6 with Clip
// dropped (its Q's range is [0, 6]), another affine; every intermediate quantized and read back.
const char* kHardSwishQdq = R"(
  opset 17
  graph g (x: u8[1,4,3,5]) -> (y) {
    xs = const f32[] {0.05}
    xz = const u8[] {120}
    xd = DequantizeLinear(x, xs, xz) @dqx
    w0q = const i8[4,1,1] {40, -30, 90, 127}
    w0s = const f32[] {0.01}
    w0 = DequantizeLinear(w0q, w0s) @dqw0
    m1 = Mul(w0, xd) @mul1
    s1 = const f32[] {0.03}
    z1 = const u8[] {110}
    m1q = QuantizeLinear(m1, s1, z1) @qm1
    m1d = DequantizeLinear(m1q, s1, z1) @dqm1
    b0q = const i8[4,1,1] {5, -100, 60, 0}
    b0s = const f32[] {0.02}
    b0 = DequantizeLinear(b0q, b0s) @dqb0
    a1 = Add(m1d, b0) @add1
    s2 = const f32[] {0.04}
    z2 = const u8[] {100}
    a1q = QuantizeLinear(a1, s2, z2) @qa1
    a1d = DequantizeLinear(a1q, s2, z2) @dqa1
    three = const f32[] {3}
    a2 = Add(a1d, three) @add3
    s3 = const f32[] {0.0235294}
    z3 = const u8[] {0}
    a2q = QuantizeLinear(a2, s3, z3) @qclip
    a2d = DequantizeLinear(a2q, s3, z3) @dqclip
    m2 = Mul(a1d, a2d) @mul2
    s4 = const f32[] {0.06}
    z4 = const u8[] {30}
    m2q = QuantizeLinear(m2, s4, z4) @qm2
    m2d = DequantizeLinear(m2q, s4, z4) @dqm2
    six = const f32[] {6}
    h = Div(m2d, six) @div
    s5 = const f32[] {0.011}
    z5 = const i8[] {-20}
    y = QuantizeLinear(h, s5, z5) @qy
  })";

TEST(FuseQuantized, ElementwiseChainBecomesOneQPointwise) {
  PassRun run;
  auto g = ParseAndRun(kHardSwishQdq, {"constant_folding", "fuse_quantized"}, &run);
  EXPECT_EQ(OpList(*g), "sampan::QPointwise") << Structure(*g);
  const ir::Node* n = FindNodeByOp(*g, "QPointwise");
  ASSERT_NE(n, nullptr);
  bool reads_x = false;  // the input read as integers
  for (const ir::Value* v : n->inputs()) reads_x |= v->name() == "x";
  EXPECT_TRUE(reads_x) << Structure(*g);
  EXPECT_EQ(n->attr("ops")->strings, (std::vector<std::string>{"Mul", "Add", "Add", "Mul", "Div"}));
  EXPECT_EQ(n->output(0)->type.dtype, DType::kInt8);
  bool recorded = false;
  for (const auto& r : run.rewrites)
    recorded |=
        r.description.find("'div': 5 element-wise op(s) and 4 intermediate Q/DQ rounding(s)") != std::string::npos;
  EXPECT_TRUE(recorded);
  // The node keeps every intermediate rounding: the Q/DQ graph's numbers exactly.
  for (uint64_t seed : {7, 8, 9}) CheckNumerics(kHardSwishQdq, {"constant_folding", "fuse_quantized"}, 0.0, seed);
}

TEST(FuseQuantized, ElementwiseRegionStopsAtValuesReadOutside) {
  // The sum before the activation is also a graph output (float), and the rounded product is
  // read by a second chain: the region keeps to what only it reads, and the numbers stay exact.
  const char* text = R"(
    opset 17
    graph g (x: u8[2,3,4], b: u8[2,3,4]) -> (y, t, y2) {
      s = const f32[] {0.1}
      z = const u8[] {128}
      xd = DequantizeLinear(x, s, z) @dqx
      bd = DequantizeLinear(b, s, z) @dqb
      t = Add(xd, bd) @add
      ts = const f32[] {0.2}
      tz = const u8[] {128}
      tq = QuantizeLinear(t, ts, tz) @qt
      td = DequantizeLinear(tq, ts, tz) @dqt
      sg = Sigmoid(td) @sig
      m = Mul(td, sg) @mul
      ms = const f32[] {0.05}
      mz = const u8[] {10}
      y = QuantizeLinear(m, ms, mz) @qy
      n = Neg(td) @neg
      y2 = QuantizeLinear(n, ms, mz) @qy2
    })";
  auto g = ParseAndRun(text, {"fuse_quantized"});
  int regions = 0;
  for (const auto& n : g->nodes()) regions += n->op_type == "QPointwise";
  EXPECT_EQ(regions, 2) << Structure(*g);  // Sigmoid+Mul, and Neg; the Add (a graph output) stays
  EXPECT_NE(FindNodeByOp(*g, "Add"), nullptr) << Structure(*g);
  CheckNumerics(text, {"fuse_quantized"}, 0.0);
}

TEST(FuseQuantized, ElementwiseRegionsItMustNotTake) {
  // An activation of another shape (broadcast along the spatial axes), a constant that is not
  // per channel, and a per-axis QuantizeLinear: no QPointwise, the same numbers.
  const char* text = R"(
    opset 17
    graph g (x: u8[1,4,3,3], r: u8[1,4,1,3]) -> (y1, y2, y3) {
      s = const f32[] {0.1}
      z = const u8[] {128}
      xd = DequantizeLinear(x, s, z) @dqx
      rd = DequantizeLinear(r, s, z) @dqr
      a = Add(xd, rd) @bcast
      y1 = QuantizeLinear(a, s, z) @q1
      c = const f32[1,1,3,1] {1, 2, 3}
      m = Mul(xd, c) @rows
      y2 = QuantizeLinear(m, s, z) @q2
      e = Sigmoid(xd) @sig
      ps = const f32[4] {0.1, 0.2, 0.1, 0.2}
      pz = const u8[4] {0, 0, 0, 0}
      y3 = QuantizeLinear(e, ps, pz) {axis=1} @q3
    })";
  auto g = ParseAndRun(text, {"fuse_quantized"});
  EXPECT_EQ(FindNodeByOp(*g, "QPointwise"), nullptr) << Structure(*g);
  CheckNumerics(text, {"fuse_quantized"}, 0.0);
}

TEST(FuseQuantized, TargetsWithoutIntegerKernelsGetFloatWeights) {
  // PassManagerOptions::integer_products = false (the cuda backend today): weights folded to
  // float constants, no integer node, the graph's meaning unchanged.
  auto g = MustParse(kQdq);
  PassManagerOptions o = OnlyPasses(kPasses);
  o.integer_products = false;
  PassManager pm(o);
  ASSERT_TRUE(pm.Run(*g).ok());
  EXPECT_EQ(FindNodeByOp(*g, "QConv"), nullptr);
  EXPECT_EQ(FindNodeByOp(*g, "QMatMul"), nullptr);
  for (const auto& n : g->nodes())
    if (n->op_type == "DequantizeLinear") {
      EXPECT_FALSE(n->input(0)->is_constant()) << n->Label();
    }
}

TEST(FuseQuantized, PatternsItMustNotTake) {
  // Per-axis activation scale, weights with a block size, uint8 zero point on a QuantizeLinear
  // read twice: nothing fuses, and the graph still computes the same.
  const char* text = R"(
    opset 21
    graph g (x: f32[1,4,4,4]) -> (y, q) {
      xs = const f32[4] {0.1, 0.2, 0.1, 0.2}
      xz = const u8[4] {0}
      xq = QuantizeLinear(x, xs, xz) {axis=1} @qx
      xd = DequantizeLinear(xq, xs, xz) {axis=1} @dqx
      wq = const i8[4,4,1,1] random
      ws = const f32[4,2,1,1] {0.1}
      w = DequantizeLinear(wq, ws) {axis=1, block_size=2} @dqw
      c = Conv(xd, w) @conv
      s = const f32[] {0.1}
      z = const u8[] {0}
      q = QuantizeLinear(c, s, z) @q
      y = DequantizeLinear(q, s, z) @dq
    })";
  auto g = MustParse(text);
  PassRun run = RunPasses(*g, {"fuse_quantized"});
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  EXPECT_EQ(FindNodeByOp(*g, "QConv"), nullptr) << Structure(*g);
}

// FP8: float8 activation and per-tensor float8 weight into MatMul -> QMatMul with float8 operands
// (and a float8 output Q taken in) on a target with FP8 products and no integer ones (cuda); on a
// target without FP8 products the weight folds to float; per-channel float8 weights stay float.
const char* kFp8Qdq = R"(
  opset 21
  graph g (x: f32[4,32]) -> (y) {
    xs = const f32[] {0.05}
    xz = const i8[] {0}
    xq = QuantizeLinear(x, xs, xz) @qx
    xd = DequantizeLinear(xq, xs, xz) @dqx
    wq = const i8[32,16] random
    ws = const f32[] {0.01}
    w = DequantizeLinear(wq, ws) @dqw
    h = MatMul(xd, w) @mm
    ys = const f32[] {0.1}
    yz = const i8[] {0}
    yq = QuantizeLinear(h, ys, yz) @qy
    y = DequantizeLinear(yq, ys, yz) @dqy
  })";

ir::Node* NodeNamed(const ir::Graph& g, const std::string& name) {
  for (const auto& n : g.nodes())
    if (n->name == name) return n.get();
  return nullptr;
}

// The text form writes no float8 constants: every int8 constant becomes float8 e4m3fn of the same
// (small integer) values, and the types are inferred again.
void ToFp8(ir::Graph& g, bool per_channel_weight = false) {
  std::map<ir::Value*, ir::Value*> done;
  std::vector<ir::Node*> nodes;
  for (const auto& n : g.nodes()) nodes.push_back(n.get());
  for (ir::Node* n : nodes)
    for (size_t i = 0; i < n->num_inputs(); ++i) {
      ir::Value* v = n->input(i);
      if (v == nullptr || !v->is_constant() || v->data.dtype() != DType::kInt8) continue;
      ir::Value*& r = done[v];
      if (r == nullptr) {
        Tensor t = Tensor::Alloc(DType::kFloat8E4M3FN, v->data.shape());
        for (int64_t k = 0; k < t.numel(); ++k)
          static_cast<uint8_t*>(t.mutable_raw())[k] =
              SmallFloatFromDouble(DType::kFloat8E4M3FN, v->data.data<int8_t>()[k], true);
        auto c = g.AddConstant(g.FreshName(v->name() + "_f8"), std::move(t));
        ASSERT_TRUE(c.ok());
        r = *c;
      }
      n->SetInput(i, r);
    }
  if (per_channel_weight) {
    ir::Node* dqw = NodeNamed(g, "dqw");
    auto c = g.AddConstant("ws_c", Tensor::FromVector(DType::kFloat32, std::vector<float>(16, 0.01f), {16}));
    ASSERT_TRUE(c.ok());
    dqw->SetInput(1, *c);
  }
  for (ir::Node* n : nodes)
    if (n->op_type == "QuantizeLinear") n->output(0)->type.dtype = DType::kFloat8E4M3FN;
  g.RemoveUnusedValues();
  {
    Status st = ops::InferTypes(g);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
}

PassRun RunFp8(ir::Graph& g, bool fp8_products) {
  PassManagerOptions o = OnlyPasses({"constant_folding", "fuse_quantized"});
  o.integer_products = false;
  o.fp8_products = fp8_products;
  PassManager pm(o);
  PassRun r;
  r.status = pm.Run(g);
  r.rewrites = pm.context().rewrites;
  return r;
}

TEST(FuseQuantized, Fp8MatMulBecomesAnFp8Product) {
  auto g = MustParse(kFp8Qdq);
  ToFp8(*g);
  ASSERT_EQ(NodeNamed(*g, "qy")->output(0)->type.dtype, DType::kFloat8E4M3FN);
  PassRun run = RunFp8(*g, true);
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  const ir::Node* mm = NodeNamed(*g, "mm");
  ASSERT_NE(mm, nullptr) << Structure(*g);
  EXPECT_EQ(mm->op_type, "QMatMul") << Structure(*g);
  EXPECT_EQ(mm->input(0)->type.dtype, DType::kFloat8E4M3FN);
  EXPECT_EQ(mm->input(3)->type.dtype, DType::kFloat8E4M3FN);
  EXPECT_EQ(mm->output(0)->type.dtype, DType::kFloat8E4M3FN);  // qy taken in
  EXPECT_EQ(NodeNamed(*g, "qy"), nullptr);
  // Without FP8 products: the weight folds, the product stays float.
  auto f = MustParse(kFp8Qdq);
  ToFp8(*f);
  run = RunFp8(*f, false);
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  EXPECT_EQ(NodeNamed(*f, "mm")->op_type, "MatMul");
  EXPECT_EQ(FindNodeByOp(*f, "QMatMul"), nullptr);
  // Per-channel float8 weights: cuBLASLt scales whole operands, so no FP8 product.
  auto c = MustParse(kFp8Qdq);
  ToFp8(*c, true);
  run = RunFp8(*c, true);
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  EXPECT_EQ(FindNodeByOp(*c, "QMatMul"), nullptr) << Structure(*c);
}

}  // namespace
}  // namespace sampan::passes::testing
