// Integer kernels of the CPU backend (backends/cpu/onednn_quant.cpp): sampan::QConv and
// sampan::QMatMul on oneDNN's int8 primitives, per-tensor QuantizeLinear/DequantizeLinear steps.
// Each case runs the same graph on the cpu backend and on the reference kernels (which compute
// the unfused Q/DQ graph) and checks that the cpu step really is the integer kernel.
// Quantized outputs may differ by one step where an intermediate rounds the other way; on CPUs
// without VNNI oneDNN halves the weights to keep u8 x s8 pairs from saturating 16 bits, which
// costs up to a few more steps (measured here: see the bounds).
#include <gtest/gtest.h>

#include "backends/cpu/cpu_test_util.h"
#include "backends/cpu/isa.h"
#include "ops/run_node.h"

namespace sampan::cpu {
namespace {

using testing::CpuEngineFor;
using testing::Parse;
using testing::RandomTensor;
using testing::StepLabels;

Tensor IntTensor(DType dtype, const Shape& shape, std::mt19937_64& rng, int lo, int hi) {
  Tensor t = Tensor::Alloc(dtype, shape);
  std::uniform_int_distribution<int> d(lo, hi);
  (void)DispatchDType(dtype, [&]<class T>() {
    T* p = t.mutable_data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(d(rng));
  });
  return t;
}

// Replaces the `{W}` placeholder constants by random integer weights and runs both ways.
struct Outcome {
  Tensor cpu, ref;
  std::vector<std::string> labels;
};

Outcome RunBoth(const std::string& text, const std::map<std::string, Tensor>& inputs, uint64_t seed, int wmax = 127) {
  std::mt19937_64 rng(seed);
  auto with_weights = [&](std::unique_ptr<ir::Graph> g) {
    std::mt19937_64 wr(seed + 1);
    for (ir::Value* v : g->values())
      if (v->is_constant() && v->name().rfind("wq", 0) == 0)
        v->data = IntTensor(DType::kInt8, v->data.shape(), wr, -wmax, wmax);
    return g;
  };
  Outcome o;
  // Reference.
  {
    reference::Executor exec(std::shared_ptr<const ir::Graph>(with_weights(Parse(text))));
    auto out = exec.Run(inputs);
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    if (out.ok()) o.ref = (*out)[0];
  }
  // CPU: build from the same graph text, weights replaced the same way.
  builder::BuildConfig config;
  config.backend = "cpu";
  for (const passes::PassDef* p : passes::AllPasses()) config.disabled_passes.insert(p->name);
  auto plan = builder::Build(with_weights(Parse(text)), config, nullptr);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return o;
  runtime::EngineOptions options;
  options.threads = 2;
  auto engine = runtime::Engine::Create(std::move(plan).value(), options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return o;
  auto ctx = (*engine)->CreateContext();
  EXPECT_TRUE(ctx.ok());
  auto out = (*ctx)->Run(inputs);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  if (out.ok()) o.cpu = (*out)[0];
  o.labels = StepLabels(**engine, inputs);
  (void)rng;
  return o;
}

// Largest |a - b| in units of `step` (the output scale for quantized outputs).
double MaxSteps(const Tensor& a, const Tensor& b, double step) {
  EXPECT_EQ(a.shape(), b.shape());
  EXPECT_EQ(a.dtype(), b.dtype());
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return INFINITY;
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    worst = std::max(worst, std::fabs(ElementAsDouble(a, i) - ElementAsDouble(b, i)) / step);
  return worst;
}

bool HasLabel(const std::vector<std::string>& labels, const std::string& op, const std::string& kind) {
  for (const auto& l : labels)
    if (l.rfind(op, 0) == 0 && l.find(kind) != std::string::npos) return true;
  return false;
}

// Relative L2 distance of a from b, over the dequantized values (`scale`, `zp`).
double RelL2(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = ElementAsDouble(a, i) - ElementAsDouble(b, i);
    num += d * d;
    den += ElementAsDouble(b, i) * ElementAsDouble(b, i);
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// The kernel halved the weights (no VNNI): 7-bit weights, so a bound on the whole error instead
// of a step count.
bool Halved(const std::vector<std::string>& labels) {
  for (const auto& l : labels)
    if (l.find(" w7]") != std::string::npos) return true;
  return false;
}

// Outputs agree: within `steps` of the reference element by element with full 8-bit weights;
// with halved ones, within 3% relative L2 (of the values around the zero point `zp`).
void ExpectClose(const Outcome& o, double step, double steps, double zp = 0) {
  if (!Halved(o.labels)) {
    EXPECT_LE(MaxSteps(o.cpu, o.ref, step), steps);
    return;
  }
  Tensor a = Tensor::Alloc(DType::kFloat64, o.cpu.shape()), b = Tensor::Alloc(DType::kFloat64, o.ref.shape());
  ASSERT_EQ(a.numel(), b.numel());
  for (int64_t i = 0; i < a.numel(); ++i) {
    a.mutable_data<double>()[i] = ElementAsDouble(o.cpu, i) - zp;
    b.mutable_data<double>()[i] = ElementAsDouble(o.ref, i) - zp;
  }
  const double err = RelL2(a, b);
  std::printf("  7-bit weights: relative L2 %.4f\n", err);
  EXPECT_LE(err, 0.03);
}

std::string Joined(const std::vector<std::string>& labels) {
  std::string s;
  for (const auto& l : labels) s += l + "\n";
  return s;
}

TEST(CpuQuant, ConvUint8WithZeroPointPerChannelReluQuantizedOut) {
  const char* text = R"(
    opset 17
    graph g (x: u8[2,8,9,9]) -> (y) {
      xs = const f32[] {0.02}
      xz = const u8[] {3}
      wq = const i8[16,8,3,3]
      ws = const f32[16] {0.01, 0.02, 0.005, 0.011, 0.013, 0.017, 0.008, 0.009, 0.01, 0.02, 0.03, 0.004, 0.006, 0.007, 0.012, 0.015}
      b = const f32[16] {0.5, -1, 0.25, 2, -0.5, 1, 0, -2, 0.1, 0.2, -0.3, 0.4, 1.5, -1.5, 0.7, -0.7}
      ys = const f32[] {0.15}
      yz = const u8[] {10}
      y = sampan::QConv(x, xs, xz, wq, ws, _, b, _, ys, yz) {pads=[1, 1, 1, 1], activation="Relu"} @conv
    })";
  std::mt19937_64 rng(1);
  Outcome o = RunBoth(text, {{"x", IntTensor(DType::kUInt8, {2, 8, 9, 9}, rng, 0, 255)}}, 7);
  EXPECT_TRUE(HasLabel(o.labels, "QConv", "onednn")) << Joined(o.labels);
  ExpectClose(o, 1.0, 2.0, 10);
}

TEST(CpuQuant, SevenBitWeightsAreTakenAsTheyAre) {
  // |w| <= 64 cannot saturate 16-bit pair sums: full precision on every CPU.
  const char* text = R"(
    opset 17
    graph g (x: u8[1,32,6,6]) -> (y) {
      xs = const f32[] {0.02}
      xz = const u8[] {0}
      wq = const i8[16,32,3,3]
      ws = const f32[] {0.01}
      ys = const f32[] {0.2}
      yz = const u8[] {128}
      y = sampan::QConv(x, xs, xz, wq, ws, _, _, _, ys, yz) {pads=[1, 1, 1, 1]} @conv
    })";
  std::mt19937_64 rng(11);
  Outcome o = RunBoth(text, {{"x", IntTensor(DType::kUInt8, {1, 32, 6, 6}, rng, 0, 255)}}, 21, 64);
  EXPECT_TRUE(HasLabel(o.labels, "QConv", "onednn")) << Joined(o.labels);
  EXPECT_FALSE(Halved(o.labels)) << Joined(o.labels);
  EXPECT_LE(MaxSteps(o.cpu, o.ref, 1.0), 1.0);
}

TEST(CpuQuant, ConvInt8StridedPerTensorFloatOutWithResidualAndSiLU) {
  const char* text = R"(
    opset 17
    graph g (x: i8[1,16,10,10], r: f32[1,8,5,5]) -> (y) {
      xs = const f32[] {0.03}
      xz = const i8[] {0}
      wq = const i8[8,16,3,3]
      ws = const f32[] {0.004}
      b = const f32[8] {0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.7, -0.8}
      y = sampan::QConv(x, xs, xz, wq, ws, _, b, r) {pads=[1, 1, 1, 1], strides=[2, 2], activation="SiLU"} @conv
    })";
  std::mt19937_64 rng(2);
  Outcome o = RunBoth(text,
                      {{"x", IntTensor(DType::kInt8, {1, 16, 10, 10}, rng, -128, 127)},
                       {"r", RandomTensor(DType::kFloat32, {1, 8, 5, 5}, rng, -1, 1)}},
                      8);
  EXPECT_TRUE(HasLabel(o.labels, "QConv", "onednn")) << Joined(o.labels);
  // Float output: within a few accumulator steps (x_scale * w_scale) of the reference.
  ExpectClose(o, 0.03 * 0.004, 64.0);
}

TEST(CpuQuant, DepthwiseConvInt8Out) {
  const char* text = R"(
    opset 17
    graph g (x: u8[1,12,7,7]) -> (y) {
      xs = const f32[] {0.05}
      xz = const u8[] {128}
      wq = const i8[12,1,3,3]
      ws = const f32[] {0.01}
      ys = const f32[] {0.05}
      yz = const i8[] {-5}
      y = sampan::QConv(x, xs, xz, wq, ws, _, _, _, ys, yz) {pads=[1, 1, 1, 1], group=12} @dw
    })";
  std::mt19937_64 rng(3);
  Outcome o = RunBoth(text, {{"x", IntTensor(DType::kUInt8, {1, 12, 7, 7}, rng, 0, 255)}}, 9);
  EXPECT_TRUE(HasLabel(o.labels, "QConv", "onednn")) << Joined(o.labels);
  ExpectClose(o, 1.0, 2.0, -5);
}

TEST(CpuQuant, MatMulRank3PerColumnGeluQuantizedOut) {
  const char* text = R"(
    opset 17
    graph g (x: u8[2,5,32]) -> (y) {
      xs = const f32[] {0.01}
      xz = const u8[] {120}
      wq = const i8[32,24]
      ws = const f32[24] {0.01}
      b = const f32[24] {0.25}
      ys = const f32[] {0.02}
      yz = const u8[] {20}
      y = sampan::QMatMul(x, xs, xz, wq, ws, _, b, _, ys, yz) {activation="Gelu"} @mm
    })";
  std::mt19937_64 rng(4);
  Outcome o = RunBoth(text, {{"x", IntTensor(DType::kUInt8, {2, 5, 32}, rng, 0, 255)}}, 10);
  EXPECT_TRUE(HasLabel(o.labels, "QMatMul", "onednn")) << Joined(o.labels);
  EXPECT_EQ(o.cpu.shape(), (Shape{2, 5, 24}));
  ExpectClose(o, 1.0, 2.0, 20);
}

TEST(CpuQuant, MatMulFloatOutWithResidual) {
  const char* text = R"(
    opset 17
    graph g (x: i8[6,16], r: f32[6,8]) -> (y) {
      xs = const f32[] {0.02}
      xz = const i8[] {0}
      wq = const i8[16,8]
      ws = const f32[8] {0.01, 0.02, 0.03, 0.04, 0.01, 0.02, 0.03, 0.04}
      y = sampan::QMatMul(x, xs, xz, wq, ws, _, _, r) @mm
    })";
  std::mt19937_64 rng(5);
  Outcome o = RunBoth(text,
                      {{"x", IntTensor(DType::kInt8, {6, 16}, rng, -128, 127)},
                       {"r", RandomTensor(DType::kFloat32, {6, 8}, rng, -1, 1)}},
                      11);
  EXPECT_TRUE(HasLabel(o.labels, "QMatMul", "onednn")) << Joined(o.labels);
  ExpectClose(o, 0.02 * 0.04, 64.0);
}

TEST(CpuQuant, QuantizeDequantizeStepsAreExact) {
  const char* text = R"(
    opset 17
    graph g (x: f32[3,50,7]) -> (y) {
      s = const f32[] {0.037}
      z = const u8[] {131}
      q = QuantizeLinear(x, s, z) @q
      s2 = const f32[] {0.011}
      z2 = const i8[] {-7}
      d = DequantizeLinear(q, s, z) @dq
      q2 = QuantizeLinear(d, s2, z2) @q2
      y = DequantizeLinear(q2, s2, z2) @dq2
    })";
  std::mt19937_64 rng(6);
  Outcome o = RunBoth(text, {{"x", RandomTensor(DType::kFloat32, {3, 50, 7}, rng, -6, 6)}}, 12);
  EXPECT_TRUE(HasLabel(o.labels, "QuantizeLinear", "cpu per-tensor")) << Joined(o.labels);
  EXPECT_TRUE(HasLabel(o.labels, "DequantizeLinear", "cpu per-tensor")) << Joined(o.labels);
  EXPECT_EQ(MaxSteps(o.cpu, o.ref, 1.0), 0.0);
}

TEST(CpuQuant, QLinearAddIsExactInBlockedLayouts) {
  // Two QConv outputs (oneDNN's blocked layout) added by com.microsoft::QLinearAdd: the step
  // reads them as stored and gives the reference kernel's bits.
  const char* text = R"(
    opset 17
    graph g (x: u8[1,16,6,6]) -> (y) {
      xs = const f32[] {0.02}
      xz = const u8[] {3}
      wqa = const i8[16,16,1,1]
      wqb = const i8[16,16,3,3]
      ws = const f32[] {0.002}
      s1 = const f32[] {0.05}
      z1 = const u8[] {100}
      s2 = const f32[] {0.07}
      z2 = const u8[] {90}
      a = sampan::QConv(x, xs, xz, wqa, ws, _, _, _, s1, z1) @ca
      b = sampan::QConv(x, xs, xz, wqb, ws, _, _, _, s2, z2) {pads=[1, 1, 1, 1]} @cb
      s3 = const f32[] {0.09}
      z3 = const u8[] {0}
      y = com.microsoft::QLinearAdd(a, s1, z1, b, s2, z2, s3, z3) @add
    })";
  std::mt19937_64 rng(12);
  Outcome o = RunBoth(text, {{"x", IntTensor(DType::kUInt8, {1, 16, 6, 6}, rng, 0, 255)}}, 31, 64);
  EXPECT_TRUE(HasLabel(o.labels, "QLinearAdd", "cpu per-tensor")) << Joined(o.labels);
  EXPECT_LE(MaxSteps(o.cpu, o.ref, 1.0), 1.0);
}

// sampan::QPointwise (a Q/DQ model's element-wise chain as one node) after two QConvs, so its
// activations come in oneDNN's blocked / channels-last u8 layouts: per-channel and scalar
// constants, an intermediate rounding to int8 and one to uint8, the output in the layout it came
// in. The convolutions' outputs are graph outputs too, and the reference QPointwise kernel runs
// on exactly those (a convolution may round one step the other way than the reference's):
// arithmetic ops give its bits at every kernel variant (baseline, AVX2, AVX-512); Sigmoid,
// computed as the CPU's unary kernel computes it, is within one step.
std::string PointwiseGraph(int64_t c, const std::string& ops, const std::string& lhs, const std::string& rhs,
                           const std::string& fq, const std::string& fq_zps, const std::string& fq_types, int n_ops) {
  std::string params = "[";
  for (int i = 0; i < 2 * n_ops; ++i) params += i ? ", 0.0" : "0.0";
  params += "]";
  const std::string C = std::to_string(c);
  std::string per_channel;
  for (int64_t i = 0; i < c; ++i)
    per_channel += (i ? ", " : "") + std::to_string(0.5 + 0.1 * static_cast<double>(i % 7) - 0.3);
  return R"(
    opset 17
    graph g (x: u8[2,)" +
         C + R"(,5,7]) -> (y, a, b) {
      xs = const f32[] {0.02}
      xz = const u8[] {3}
      wqa = const i8[)" +
         C + "," + C + R"(,1,1]
      wqb = const i8[)" +
         C + "," + C + R"(,3,3]
      ws = const f32[] {0.002}
      s1 = const f32[] {0.05}
      z1 = const u8[] {100}
      s2 = const f32[] {0.07}
      z2 = const u8[] {90}
      a = sampan::QConv(x, xs, xz, wqa, ws, _, _, _, s1, z1) @ca
      b = sampan::QConv(x, xs, xz, wqb, ws, _, _, _, s2, z2) {pads=[1, 1, 1, 1]} @cb
      w = const f32[)" +
         C + R"(,1,1] {)" + per_channel + R"(}
      three = const f32[] {3}
      y = sampan::QPointwise(a, b, w, three) {ops=)" +
         ops + ", lhs=" + lhs + ", rhs=" + rhs + ", params=" + params + ", fq_scales=" + fq +
         ", fq_zero_points=" + fq_zps + ", fq_types=" + fq_types +
         R"(, in_scales=[0.05, 0.07, 0.0, 0.0], in_zero_points=[100, 90, 0, 0], y_scale=0.03, y_zero_point=7, y_type=2} @pw
    })";
}

// Runs the graph on the cpu backend (passes off); *want is the reference QPointwise on the cpu's
// own convolution outputs. Returns the step labels.
std::vector<std::string> RunPointwise(const std::string& text, int64_t c, uint64_t seed, Tensor* got, Tensor* want) {
  auto with_weights = [&](std::unique_ptr<ir::Graph> g) {
    std::mt19937_64 wr(seed);
    for (ir::Value* v : g->values())
      if (v->is_constant() && v->name().rfind("wq", 0) == 0)
        v->data = IntTensor(DType::kInt8, v->data.shape(), wr, -64, 64);
    return g;
  };
  std::mt19937_64 rng(seed + 1);
  std::map<std::string, Tensor> in{{"x", IntTensor(DType::kUInt8, {2, c, 5, 7}, rng, 0, 255)}};
  builder::BuildConfig config;
  config.backend = "cpu";
  for (const passes::PassDef* p : passes::AllPasses()) config.disabled_passes.insert(p->name);
  std::unique_ptr<ir::Graph> g = with_weights(Parse(text));
  std::shared_ptr<ir::Graph> keep = with_weights(Parse(text));  // for the reference node
  auto plan = builder::Build(std::move(g), config, nullptr);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return {};
  runtime::EngineOptions options;
  options.threads = 2;
  auto engine = runtime::Engine::Create(std::move(plan).value(), options);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return {};
  auto ctx = (*engine)->CreateContext();
  EXPECT_TRUE(ctx.ok());
  auto out = (*ctx)->Run(in);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  if (!out.ok()) return {};
  *got = (*out)[0];
  const ir::Node* pw = nullptr;
  for (const auto& n : keep->nodes())
    if (n->name == "pw") pw = n.get();
  std::vector<Tensor> ref;
  Status st =
      ops::RunNode(*pw, keep->opset(), {&(*out)[1], &(*out)[2], &pw->input(2)->data, &pw->input(3)->data}, &ref);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (st.ok()) *want = ref[0];
  return StepLabels(**engine, in);
}

TEST(CpuQuant, QPointwiseIsExactInBlockedLayoutsAtEveryVariant) {
  // r4 = a * w (per channel), rounded to int8; r5 = r4 + b; r6 = r5 + 3 rounded to uint8 [0, 6];
  // r7 = r5 * r6; r8 = r7 / 3; quantized.
  for (int64_t c : {16, 24, 8, 5}) {
    SCOPED_TRACE(c);
    const std::string text =
        PointwiseGraph(c, R"(["Mul", "Add", "Add", "Mul", "Div"])", "[0, 4, 5, 5, 7]", "[2, 1, 3, 6, 3]",
                       "[0.04, 0.0, 0.0235294, 0.0, 0.0]", "[-5, 0, 0, 0, 0]", "[3, 0, 2, 0, 0]", 5);
    for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512}) {
      ScopedKernelVariant pin(isa);
      if (!pin.ok()) continue;
      SCOPED_TRACE(IsaName(isa));
      Tensor got, want;
      std::vector<std::string> labels = RunPointwise(text, c, 40 + static_cast<uint64_t>(c), &got, &want);
      EXPECT_TRUE(HasLabel(labels, "QPointwise", "cpu")) << Joined(labels);
      if (c == 16) {
        EXPECT_TRUE(HasLabel(labels, "QPointwise", "in layout")) << Joined(labels);
      }
      EXPECT_EQ(MaxSteps(got, want, 1.0), 0.0) << Joined(labels);
    }
  }
}

TEST(CpuQuant, QPointwiseSigmoidWithinOneStep) {
  // r4 = sigmoid(a); r5 = b * r4, rounded to uint8; r6 = r5 - w.
  const std::string text = PointwiseGraph(16, R"(["Sigmoid", "Mul", "Sub"])", "[0, 1, 5]", "[-1, 4, 2]",
                                          "[0.0, 0.05, 0.0]", "[0, 20, 0]", "[0, 2, 0]", 3);
  Tensor got, want;
  std::vector<std::string> labels = RunPointwise(text, 16, 43, &got, &want);
  EXPECT_TRUE(HasLabel(labels, "QPointwise", "cpu")) << Joined(labels);
  EXPECT_LE(MaxSteps(got, want, 1.0), 1.0);
}

TEST(CpuQuant, NonZeroWeightZeroPointRunsOnTheReferenceKernel) {
  // oneDNN has no weight zero points: the node keeps the reference kernel and the right answer.
  const char* text = R"(
    opset 17
    graph g (x: u8[1,4,5,5]) -> (y) {
      xs = const f32[] {0.02}
      xz = const u8[] {0}
      wq = const i8[4,4,1,1]
      ws = const f32[] {0.01}
      wz = const i8[] {3}
      y = sampan::QConv(x, xs, xz, wq, ws, wz) @conv
    })";
  std::mt19937_64 rng(7);
  Outcome o = RunBoth(text, {{"x", IntTensor(DType::kUInt8, {1, 4, 5, 5}, rng, 0, 255)}}, 13);
  EXPECT_FALSE(HasLabel(o.labels, "QConv", "onednn")) << Joined(o.labels);
  EXPECT_EQ(MaxSteps(o.cpu, o.ref, 1.0), 0.0);
}

}  // namespace
}  // namespace sampan::cpu
