// The builder: profile validation and specialization, precision assignment
// (fp16/bf16, per-layer overrides), glob matching.
#include "builder/builder.h"

#include <gtest/gtest.h>

#include <cmath>

#include "passes/pass_test_util.h"
#include "runtime/engine.h"

namespace sampan::builder {
namespace {

using passes::testing::MustParse;
using passes::testing::RandomInputs;

plan::Profile OneInput(const std::string& name, Shape min, Shape opt, Shape max) {
  return plan::Profile{{name, plan::ShapeRange{std::move(min), std::move(opt), std::move(max)}}};
}

const char* kDynamic = R"(
  opset 17
  graph g (x: f32[N,3,H,W], m: f32[N,4]) -> (y, z) {
    y = Relu(x) @relu
    z = Neg(m) @neg
  }
)";

::testing::AssertionResult FailsWith(const Status& st, std::initializer_list<const char*> parts) {
  if (st.ok()) return ::testing::AssertionFailure() << "expected an error";
  for (const char* p : parts)
    if (st.message().find(p) == std::string::npos)
      return ::testing::AssertionFailure() << "'" << p << "' not in: " << st.message();
  return ::testing::AssertionSuccess();
}

TEST(ApplyProfiles, UnknownInput) {
  auto g = MustParse(kDynamic);
  plan::Profile p = OneInput("nope", {1, 3, 8, 8}, {1, 3, 8, 8}, {1, 3, 8, 8});
  EXPECT_TRUE(FailsWith(ApplyProfiles(*g, {p}), {"'nope'", "no input"}));
}

TEST(ApplyProfiles, ConstantIsNotAnInput) {
  auto g = MustParse(R"(
    opset 17
    graph g (x: f32[N]) -> (y) {
      c = const f32[1] {1}
      y = Add(x, c) @add
    }
  )");
  EXPECT_TRUE(FailsWith(ApplyProfiles(*g, {OneInput("c", {1}, {1}, {1})}), {"'c'", "no input"}));
}

TEST(ApplyProfiles, RankMismatch) {
  auto g = MustParse(kDynamic);
  plan::Profile p = OneInput("x", {1, 3, 8}, {1, 3, 8}, {1, 3, 8});
  p["m"] = plan::ShapeRange{{1, 4}, {1, 4}, {1, 4}};
  EXPECT_TRUE(FailsWith(ApplyProfiles(*g, {p}), {"'x'", "rank 3"}));
}

TEST(ApplyProfiles, MinOptMaxRankDiffer) {
  auto g = MustParse(kDynamic);
  plan::Profile p = OneInput("x", {1, 3, 8, 8}, {1, 3, 8}, {1, 3, 8, 8});
  EXPECT_TRUE(FailsWith(ApplyProfiles(*g, {p}), {"'x'", "same rank"}));
}

TEST(ApplyProfiles, MinGreaterThanOpt) {
  auto g = MustParse(kDynamic);
  plan::Profile p = OneInput("x", {4, 3, 8, 8}, {2, 3, 8, 8}, {8, 3, 8, 8});
  p["m"] = plan::ShapeRange{{1, 4}, {2, 4}, {8, 4}};
  EXPECT_TRUE(FailsWith(ApplyProfiles(*g, {p}), {"'x'", "dimension 0", "4/2/8"}));
}

TEST(ApplyProfiles, OptGreaterThanMax) {
  auto g = MustParse(kDynamic);
  plan::Profile p = OneInput("m", {1, 4}, {9, 4}, {8, 4});
  EXPECT_TRUE(FailsWith(ApplyProfiles(*g, {p}), {"'m'", "dimension 0", "1/9/8"}));
}

TEST(ApplyProfiles, FixedDimMismatch) {
  auto g = MustParse(kDynamic);
  plan::Profile p = OneInput("x", {1, 4, 8, 8}, {1, 4, 8, 8}, {1, 4, 8, 8});
  EXPECT_TRUE(FailsWith(ApplyProfiles(*g, {p}), {"'x'", "dimension 1", "fixed to 3"}));
  // A range over a fixed dim is wrong too, even when it contains the fixed size.
  auto g2 = MustParse(kDynamic);
  p = OneInput("x", {1, 1, 8, 8}, {1, 3, 8, 8}, {1, 3, 8, 8});
  EXPECT_TRUE(FailsWith(ApplyProfiles(*g2, {p}), {"'x'", "dimension 1", "fixed to 3"}));
}

TEST(ApplyProfiles, MissingDynamicInput) {
  auto g = MustParse(kDynamic);
  plan::Profile p = OneInput("x", {1, 3, 8, 8}, {1, 3, 8, 8}, {1, 3, 8, 8});
  EXPECT_TRUE(FailsWith(ApplyProfiles(*g, {p}), {"profile 0", "'m'", "dynamic"}));
  // The second profile is checked too.
  auto g2 = MustParse(kDynamic);
  plan::Profile full = p;
  full["m"] = plan::ShapeRange{{1, 4}, {1, 4}, {1, 4}};
  EXPECT_TRUE(FailsWith(ApplyProfiles(*g2, {full, p}), {"profile 1", "'m'"}));
}

TEST(ApplyProfiles, SingleFixedProfileSpecializes) {
  auto g = MustParse(kDynamic);
  plan::Profile p = OneInput("x", {2, 3, 8, 8}, {2, 3, 8, 8}, {2, 3, 8, 8});
  p["m"] = plan::ShapeRange{{1, 4}, {2, 4}, {4, 4}};  // a range: stays dynamic
  ASSERT_TRUE(ApplyProfiles(*g, {p}).ok());
  EXPECT_EQ(ir::PrintType(g->FindValue("x")->type), "f32[2,3,8,8]");
  EXPECT_EQ(ir::PrintType(g->FindValue("m")->type), "f32[N,4]");
}

TEST(ApplyProfiles, SeveralProfilesDoNotSpecialize) {
  auto g = MustParse(kDynamic);
  plan::Profile a = OneInput("x", {2, 3, 8, 8}, {2, 3, 8, 8}, {2, 3, 8, 8});
  a["m"] = plan::ShapeRange{{2, 4}, {2, 4}, {2, 4}};
  plan::Profile b = OneInput("x", {4, 3, 8, 8}, {4, 3, 8, 8}, {4, 3, 8, 8});
  b["m"] = plan::ShapeRange{{4, 4}, {4, 4}, {4, 4}};
  ASSERT_TRUE(ApplyProfiles(*g, {a, b}).ok());
  EXPECT_EQ(ir::PrintType(g->FindValue("x")->type), "f32[N,3,H,W]");
}

TEST(Build, SingleFixedProfileFoldsShapeArithmetic) {
  auto g = MustParse(R"(
    opset 17
    graph g (x: f32[N,3,4,4]) -> (y) {
      s = Shape(x) @shape
      i0 = const i64[1] {0}
      d0 = Gather(s, i0) {axis=0} @gather
      minus1 = const i64[1] {-1}
      target = Concat(d0, minus1) {axis=0} @concat
      y = Reshape(x, target) @reshape
    }
  )");
  BuildConfig config;
  config.profiles = {OneInput("x", {2, 3, 4, 4}, {2, 3, 4, 4}, {2, 3, 4, 4})};
  BuildReport report;
  auto plan = Build(std::move(g), config, &report);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(passes::testing::OpList(*plan->graph), "Reshape");
  EXPECT_EQ(ir::PrintType(plan->graph->outputs()[0]->type), "f32[2,48]");
  EXPECT_EQ(report.nodes_before, 4u);
  EXPECT_EQ(report.nodes_after, 1u);
  ASSERT_EQ(plan->profiles.size(), 1u);
}

TEST(GlobMatch, Cases) {
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_TRUE(GlobMatch("*", "anything"));
  EXPECT_TRUE(GlobMatch("conv1", "conv1"));
  EXPECT_FALSE(GlobMatch("conv1", "conv10"));
  EXPECT_FALSE(GlobMatch("conv10", "conv1"));
  EXPECT_TRUE(GlobMatch("conv?", "conv1"));
  EXPECT_FALSE(GlobMatch("conv?", "conv"));
  EXPECT_FALSE(GlobMatch("conv?", "conv12"));
  EXPECT_TRUE(GlobMatch("conv*", "conv"));
  EXPECT_TRUE(GlobMatch("conv*", "conv12"));
  EXPECT_TRUE(GlobMatch("*head*", "model/head/fc"));
  EXPECT_FALSE(GlobMatch("*head*", "model/body/fc"));
  EXPECT_TRUE(GlobMatch("*/fc", "a/b/fc"));
  EXPECT_FALSE(GlobMatch("*/fc", "a/b/fc2"));
  EXPECT_TRUE(GlobMatch("a*b*c", "aXXbYYc"));
  EXPECT_TRUE(GlobMatch("a*b*c", "abbbc"));
  EXPECT_FALSE(GlobMatch("a*b*c", "acb"));
  EXPECT_TRUE(GlobMatch("**x", "x"));
  EXPECT_TRUE(GlobMatch("?*", "a"));
  EXPECT_FALSE(GlobMatch("?*", ""));
  EXPECT_FALSE(GlobMatch("", "a"));
  EXPECT_TRUE(GlobMatch("", ""));
}

TEST(ParseLayerPrecision, Forms) {
  auto lp = ParseLayerPrecision("backbone/*:fp32");
  ASSERT_TRUE(lp.ok());
  EXPECT_EQ(lp->pattern, "backbone/*");
  EXPECT_EQ(lp->precision, Precision::kFP32);
  auto colon = ParseLayerPrecision("ns::conv:fp16");  // last ':' splits
  ASSERT_TRUE(colon.ok());
  EXPECT_EQ(colon->pattern, "ns::conv");
  EXPECT_FALSE(ParseLayerPrecision("conv1").ok());
  EXPECT_FALSE(ParseLayerPrecision(":fp32").ok());
  EXPECT_FALSE(ParseLayerPrecision("conv1:fp64").ok());
  // int8 is not a float layer precision: the message says how to quantize.
  auto int8 = ParsePrecision("int8");
  EXPECT_EQ(int8.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(int8.status().message().find("--int8 --calibData"), std::string::npos);
  auto fp8 = ParsePrecision("fp8");
  EXPECT_EQ(fp8.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(fp8.status().message().find("--fp8 --calibData"), std::string::npos);
}

// A small conv net (conv-bn-relu, conv, residual, pool, fc).
const char* kConvNet = R"(
  opset 17
  graph net (x: f32[2,3,8,8]) -> (y) {
    w1 = const f32[8,3,3,3] random
    c1 = Conv(x, w1) {pads=[1, 1, 1, 1]} @conv1
    scale = const f32[8] {1, 0.5, 2, 1, 1, 1.5, 0.8, 1.2}
    bias = const f32[8] {0, 0.1, -0.1, 0.2, 0, 0, 0.3, -0.3}
    mean = const f32[8] {0.1, 0, 0, -0.3, 0, 0.2, 0, 0}
    var = const f32[8] {1, 2, 0.5, 1, 1, 1, 0.7, 1.3}
    n1 = BatchNormalization(c1, scale, bias, mean, var) @bn1
    r1 = Relu(n1) @relu1
    w2 = const f32[8,8,3,3] random
    b2 = const f32[8] random
    c2 = Conv(r1, w2, b2) {pads=[1, 1, 1, 1]} @conv2
    s = Add(c2, r1) @add
    r2 = Relu(s) @relu2
    p = GlobalAveragePool(r2) @pool
    f = Flatten(p) @flatten
    wf = const f32[8,5] random
    bf = const f32[5] random
    m = MatMul(f, wf) @head_fc
    y = Add(m, bf) @head_bias
  }
)";

double RelativeL2(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = ElementAsDouble(a, i), y = ElementAsDouble(b, i);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

Result<std::vector<Tensor>> BuildAndRun(const BuildConfig& config, const std::map<std::string, Tensor>& inputs,
                                        plan::Plan* out_plan = nullptr) {
  SP_ASSIGN_OR_RETURN(plan::Plan p, Build(MustParse(kConvNet), config, nullptr));
  if (out_plan) *out_plan = p;
  SP_ASSIGN_OR_RETURN(auto engine, runtime::Engine::Create(std::move(p)));
  SP_ASSIGN_OR_RETURN(auto ctx, engine->CreateContext());
  return ctx->Run(inputs);
}

TEST(AssignPrecision, Fp16ConvNetCloseToFp32) {
  auto inputs = RandomInputs(*MustParse(kConvNet), 3);
  BuildConfig fp32;
  plan::Plan p32;
  auto ref = BuildAndRun(fp32, inputs, &p32);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  for (Precision prec : {Precision::kFP16, Precision::kBF16}) {
    SCOPED_TRACE(PrecisionName(prec));
    BuildConfig config;
    config.precision = prec;
    plan::Plan p;
    auto low = BuildAndRun(config, inputs, &p);
    ASSERT_TRUE(low.ok()) << low.status().ToString();
    ASSERT_EQ(low->size(), 1u);
    EXPECT_EQ((*low)[0].dtype(), DType::kFloat32);
    EXPECT_EQ((*low)[0].shape(), (*ref)[0].shape());
    const double tol = prec == Precision::kFP16 ? 1e-2 : 3e-2;
    EXPECT_LT(RelativeL2((*low)[0], (*ref)[0]), tol);
    EXPECT_GT(RelativeL2((*low)[0], (*ref)[0]), 0.0) << "low precision should change the numbers a little";
    // Graph interface unchanged.
    ASSERT_EQ(p.graph->inputs().size(), 1u);
    EXPECT_EQ(p.graph->inputs()[0]->name(), "x");
    EXPECT_EQ(ir::PrintType(p.graph->inputs()[0]->type), "f32[2,3,8,8]");
    ASSERT_EQ(p.graph->outputs().size(), 1u);
    EXPECT_EQ(p.graph->outputs()[0]->name(), "y");
    EXPECT_EQ(ir::PrintType(p.graph->outputs()[0]->type), "f32[2,5]");
    // The compute layers are low precision, with their weights converted.
    const DType want = prec == Precision::kFP16 ? DType::kFloat16 : DType::kBFloat16;
    int low_layers = 0;
    for (const auto& n : p.graph->nodes()) {
      if (n->op_type == "Cast") continue;
      auto c = p.choices.find(n->name);
      ASSERT_NE(c, p.choices.end()) << n->name;
      EXPECT_EQ(c->second.precision, PrecisionName(prec)) << n->name;
      ++low_layers;
      for (const ir::Value* in : n->inputs())
        if (in && in->is_constant() && IsFloatDType(in->data.dtype())) {
          EXPECT_EQ(in->data.dtype(), want) << n->name;
        }
    }
    EXPECT_GE(low_layers, 4);
    // Casts only at the borders: one in, one out.
    int casts = 0;
    for (const auto& n : p.graph->nodes()) casts += n->op_type == "Cast";
    EXPECT_EQ(casts, 2);
    EXPECT_EQ(p.options.precision, PrecisionName(prec));
  }
}

TEST(AssignPrecision, LayerPrecisionGlobKeepsLayerFp32) {
  auto inputs = RandomInputs(*MustParse(kConvNet), 3);
  BuildConfig config;
  config.precision = Precision::kFP16;
  auto lp = ParseLayerPrecision("head_*:fp32");
  ASSERT_TRUE(lp.ok());
  config.layer_precision.push_back(*lp);
  plan::Plan p;
  auto out = BuildAndRun(config, inputs, &p);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  bool saw_head = false;
  for (const auto& n : p.graph->nodes()) {
    if (n->op_type == "Cast") continue;
    const std::string& prec = p.choices.at(n->name).precision;
    if (GlobMatch("head_*", n->name)) {
      saw_head = true;
      EXPECT_EQ(prec, "fp32") << n->name;
      for (const ir::Value* in : n->inputs()) {
        ASSERT_NE(in, nullptr);
        EXPECT_EQ(in->type.dtype, DType::kFloat32) << n->name << " input " << in->name();
      }
    } else {
      EXPECT_EQ(prec, "fp16") << n->name;
    }
  }
  EXPECT_TRUE(saw_head) << passes::testing::Nodes(*p.graph);
  EXPECT_EQ(p.options.layer_precision, std::vector<std::string>{"head_*:fp32"});
  // A later override wins.
  BuildConfig again = config;
  again.layer_precision.push_back(*ParseLayerPrecision("*:fp16"));
  plan::Plan p2;
  ASSERT_TRUE(BuildAndRun(again, inputs, &p2).ok());
  for (const auto& [name, c] : p2.choices)
    if (c.precision != "fp32") {
      EXPECT_EQ(c.precision, "fp16") << name;
    }
  for (const auto& n : p2.graph->nodes())
    if (n->op_type != "Cast") {
      EXPECT_EQ(p2.choices.at(n->name).precision, "fp16") << n->name;
    }
}

TEST(AssignPrecision, Fp32LayerInFp16NetIsRunnableAndClose) {
  auto inputs = RandomInputs(*MustParse(kConvNet), 5);
  auto ref = BuildAndRun(BuildConfig{}, inputs);
  ASSERT_TRUE(ref.ok());
  BuildConfig config;
  config.precision = Precision::kFP16;
  config.layer_precision.push_back(*ParseLayerPrecision("conv2:fp32"));
  auto out = BuildAndRun(config, inputs);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_LT(RelativeL2((*out)[0], (*ref)[0]), 1e-2);
}

// BERT's extended attention mask, (1 - mask) * finfo(float32).min added to the scores:
// in FP16 the constant would be -inf and 0 * -inf = NaN for every unmasked position.
// The layer with the out-of-range constant stays FP32 (unless --layer-precision pins it).
TEST(AssignPrecision, ConstantsBeyondFp16RangeKeepTheirLayerFp32) {
  const char* text = R"(
    opset 17
    graph g (s: f32[2,4], m: f32[2,4]) -> (y) {
      one = const f32[] {1.0}
      big = const f32[] {-3.4028234e38}
      inv = Sub(one, m)
      neg = Mul(inv, big)
      t = Add(s, neg)
      y = Softmax(t) {axis=-1}
    })";
  Tensor s = Tensor::Alloc(DType::kFloat32, {2, 4}), m = Tensor::Alloc(DType::kFloat32, {2, 4});
  for (int i = 0; i < 8; ++i) {
    s.mutable_data<float>()[i] = 0.1f * static_cast<float>(i);
    m.mutable_data<float>()[i] = (i % 4) < 3 ? 1.f : 0.f;  // the last key of each row masked
  }
  const std::map<std::string, Tensor> inputs = {{"s", s}, {"m", m}};
  auto run = [&](const BuildConfig& config, plan::Plan* out) -> Result<std::vector<Tensor>> {
    SP_ASSIGN_OR_RETURN(plan::Plan p, Build(MustParse(text), config, nullptr));
    *out = p;
    SP_ASSIGN_OR_RETURN(auto engine, runtime::Engine::Create(std::move(p)));
    SP_ASSIGN_OR_RETURN(auto ctx, engine->CreateContext());
    return ctx->Run(inputs);
  };
  plan::Plan p32;
  auto want = run(BuildConfig{}, &p32);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  for (Precision prec : {Precision::kFP16, Precision::kBF16}) {
    SCOPED_TRACE(PrecisionName(prec));
    BuildConfig low;
    low.precision = prec;
    plan::Plan p;
    auto got = run(low, &p);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    const float* g = (*got)[0].data<float>();
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(std::isfinite(g[i])) << "element " << i << " is " << g[i];
    EXPECT_LT(RelativeL2((*got)[0], (*want)[0]), 1e-2);
    const ir::Node* mul = passes::testing::FindNodeByOp(*p.graph, "Mul");
    ASSERT_NE(mul, nullptr);
    EXPECT_EQ(p.choices.at(mul->name).precision, "fp32");
    const ir::Node* sm = passes::testing::FindNodeByOp(*p.graph, "Softmax");
    ASSERT_NE(sm, nullptr);
    EXPECT_EQ(p.choices.at(sm->name).precision, PrecisionName(prec));
  }
}

// An op whose type constraints exclude the low-precision type keeps its layer FP32: YOLOv5's
// dynamic export builds its grid with Range on float, which takes float16 only from opset 27.
TEST(AssignPrecision, OpsWithoutAFp16TypeKeepTheirLayerFp32) {
  const char* text = R"(
    opset 17
    graph g (x: f32[1,N]) -> (y) {
      sh = Shape(x)
      i1 = const i64[] {1}
      n = Gather(sh, i1) {axis=0}
      nf = Cast(n) {to=1}
      zero = const f32[] {0}
      half = const f32[] {0.5}
      r = Range(zero, nf, half) @grid
      two = const f32[] {2}
      s = Mul(x, two) @scale
      sh2 = const i64[2] {1, -1}
      rr = Reshape(r, sh2)
      y = Concat(s, rr) {axis=1} @join
    })";
  Tensor x = Tensor::Alloc(DType::kFloat32, {1, 5});
  for (int i = 0; i < 5; ++i) x.mutable_data<float>()[i] = 0.25f * static_cast<float>(i);
  for (Precision prec : {Precision::kFP16, Precision::kBF16}) {
    SCOPED_TRACE(PrecisionName(prec));
    BuildConfig config;
    config.precision = prec;
    config.profiles = {OneInput("x", {1, 2}, {1, 8}, {1, 16})};
    auto p = Build(MustParse(text), config, nullptr);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->choices.at("grid").precision, "fp32");
    EXPECT_EQ(p->choices.at("scale").precision, PrecisionName(prec));
    auto engine = runtime::Engine::Create(std::move(*p));
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    auto ctx = (*engine)->CreateContext();
    ASSERT_TRUE(ctx.ok());
    auto out = (*ctx)->Run({{"x", x}});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_EQ((*out)[0].shape(), (Shape{1, 15}));
    const float* y = (*out)[0].data<float>();
    for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(y[i], 0.5f * static_cast<float>(i));
    for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(y[5 + i], 0.5f * static_cast<float>(i));
  }
}

TEST(Build, UnknownBackendAndDisabledPass) {
  BuildConfig config;
  config.backend = "tpu";
  auto unknown = Build(MustParse(kConvNet), config, nullptr);
  EXPECT_EQ(unknown.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(unknown.status().message().find("available: "), std::string::npos) << unknown.status().message();
  BuildConfig bad;
  bad.disabled_passes = {"no_such_pass"};
  auto r = Build(MustParse(kConvNet), bad, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("fold_batchnorm"), std::string::npos) << r.status().message();
  BuildConfig off;
  off.disabled_passes = {"fold_batchnorm"};
  BuildReport rep;
  auto p = Build(MustParse(kConvNet), off, &rep);
  ASSERT_TRUE(p.ok());
  EXPECT_NE(passes::testing::FindNodeByOp(*p->graph, "BatchNormalization"), nullptr);
  EXPECT_EQ(p->options.disabled_passes, std::vector<std::string>{"fold_batchnorm"});
}

}  // namespace
}  // namespace sampan::builder

namespace sampan::builder {
namespace {

// --input-format uint8-nhwc: the plan takes raw HWC bytes and gives the same
// result as the original model on the normalised NCHW float input.
TEST(InputFormat, Uint8NhwcMatchesNormalisedFloatInput) {
  const std::vector<float> mean = {123.675f, 116.28f, 103.53f}, stdv = {58.395f, 57.12f, 57.375f};
  Tensor raw = Tensor::Alloc(DType::kUInt8, {2, 8, 8, 3});
  Tensor x = Tensor::Alloc(DType::kFloat32, {2, 3, 8, 8});
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t h = 0; h < 8; ++h)
      for (int64_t w = 0; w < 8; ++w)
        for (int64_t c = 0; c < 3; ++c) {
          const uint8_t v = static_cast<uint8_t>((n * 131 + h * 37 + w * 11 + c * 71) % 256);
          raw.mutable_data<uint8_t>()[((n * 8 + h) * 8 + w) * 3 + c] = v;
          x.mutable_data<float>()[((n * 3 + c) * 8 + h) * 8 + w] = (static_cast<float>(v) - mean[c]) / stdv[c];
        }
  auto want = BuildAndRun(BuildConfig{}, {{"x", x}});
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  BuildConfig config;
  config.input_formats.push_back({"", mean, stdv});
  plan::Plan p;
  auto got = BuildAndRun(config, {{"x", raw}}, &p);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_LT(RelativeL2((*got)[0], (*want)[0]), 1e-5);
  // The plan's interface is the raw image.
  EXPECT_EQ(p.graph->inputs()[0]->name(), "x");
  EXPECT_EQ(p.graph->inputs()[0]->type.dtype, DType::kUInt8);
  // A float input of the wrong kind is refused with its name.
  auto bad = BuildAndRun(config, {{"x", x}});
  EXPECT_FALSE(bad.ok());
  // In an FP16 plan the normalisation writes half directly (no extra Cast).
  config.precision = Precision::kFP16;
  plan::Plan p16;
  auto half = BuildAndRun(config, {{"x", raw}}, &p16);
  ASSERT_TRUE(half.ok()) << half.status().ToString();
  EXPECT_LT(RelativeL2((*half)[0], (*want)[0]), 1e-2);
  for (const auto& n : p16.graph->nodes())
    if (n->op_type == "ImageInput") {
      EXPECT_EQ(n->outputs()[0]->type.dtype, DType::kFloat16);
    }
}

TEST(InputFormat, ErrorsNameTheProblem) {
  auto g = MustParse(kConvNet);
  EXPECT_NE(ApplyInputFormats(*g, {{"nope", {}, {}}}).message().find("'nope' is not an input"), std::string::npos);
  g = MustParse(kConvNet);
  EXPECT_NE(ApplyInputFormats(*g, {{"x", {1, 2}, {}}}).message().find("3 channels"), std::string::npos);
  g = MustParse(kConvNet);
  EXPECT_NE(ApplyInputFormats(*g, {{"x", {0, 0, 0}, {1, 0, 1}}}).message().find("must be > 0"), std::string::npos);
}

}  // namespace
}  // namespace sampan::builder
