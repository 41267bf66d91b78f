// BF16 plans on the CPU backend (sampan build --bf16): the graph keeps FP32 tensors (no casts,
// no converted weights), each layer's precision is recorded in the plan, and convolutions
// multiply BF16 operands into FP32 results where the CPU has AVX512-BF16 or AMX.
#include <cmath>

#include "backends/cpu/cpu_test_util.h"
#include "backends/cpu/isa.h"

namespace sampan::cpu::testing {
namespace {

// Two convolutions and a residual, as in a ResNet block.
constexpr const char* kBlock = R"(opset 17
  graph g (x: f32[N,16,H,W]) -> (y) {
    w1 = const f32[32,16,3,3] random
    b1 = const f32[32] random
    w2 = const f32[32,32,3,3] random
    w3 = const f32[32,16,1,1] random
    c1 = Conv(x, w1, b1) {pads=[1,1,1,1]} @conv1
    r1 = Relu(c1) @relu1
    c2 = Conv(r1, w2) {pads=[1,1,1,1]} @conv2
    s = Conv(x, w3) @shortcut
    a = Add(c2, s) @add
    y = Relu(a) @relu2
  })";

Result<plan::Plan> BuildCpu(builder::Precision precision) {
  builder::BuildConfig config;
  config.backend = "cpu";
  config.precision = precision;
  return builder::Build(Parse(kBlock), config, nullptr);
}

double RelL2(const Tensor& got, const Tensor& want) {
  double num = 0, den = 0;
  const float* g = got.data<float>();
  const float* w = want.data<float>();
  for (int64_t i = 0; i < want.numel(); ++i) {
    num += (double(g[i]) - w[i]) * (double(g[i]) - w[i]);
    den += double(w[i]) * w[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

TEST(CpuBf16, PlanKeepsFp32TensorsAndRecordsBf16Layers) {
  auto plan = BuildCpu(builder::Precision::kBF16);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  size_t bf16 = 0;
  for (const auto& node : plan->graph->nodes()) {
    EXPECT_NE(node->op_type, "Cast") << node->name;
    for (const ir::Value* v : node->outputs()) EXPECT_EQ(v->type.dtype, DType::kFloat32) << v->name();
    auto it = plan->choices.find(node->name);
    if (it != plan->choices.end() && it->second.precision == "bf16") ++bf16;
  }
  EXPECT_GT(bf16, 0u);
  EXPECT_EQ(plan->options.precision, "bf16");
}

// FP16 on the CPU is still a rewrite to FP16 tensors (run by the reference kernels).
TEST(CpuBf16, Fp16PlansStillConvertTheGraph) {
  auto plan = BuildCpu(builder::Precision::kFP16);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  bool has_fp16 = false;
  for (const auto& node : plan->graph->nodes())
    for (const ir::Value* v : node->outputs()) has_fp16 |= v->type.dtype == DType::kFloat16;
  EXPECT_TRUE(has_fp16);
}

TEST(CpuBf16, ConvolutionsMultiplyBf16OperandsWhereTheCpuHasThem) {
  auto fp32 = BuildCpu(builder::Precision::kFP32);
  auto bf16 = BuildCpu(builder::Precision::kBF16);
  ASSERT_TRUE(fp32.ok() && bf16.ok());
  runtime::EngineOptions options;
  options.threads = 2;
  auto e32 = runtime::Engine::Create(std::move(fp32).value(), options);
  auto e16 = runtime::Engine::Create(std::move(bf16).value(), options);
  ASSERT_TRUE(e32.ok() && e16.ok()) << e32.status().ToString() << e16.status().ToString();
  std::mt19937_64 rng(3);
  std::map<std::string, Tensor> inputs{{"x", RandomTensor(DType::kFloat32, {2, 16, 20, 20}, rng)}};
  auto c32 = (*e32)->CreateContext();
  auto c16 = (*e16)->CreateContext();
  ASSERT_TRUE(c32.ok() && c16.ok());
  auto want = (*c32)->Run(inputs);
  auto got = (*c16)->Run(inputs);
  ASSERT_TRUE(want.ok() && got.ok()) << want.status().ToString() << got.status().ToString();
  const double rel = RelL2((*got)[0], (*want)[0]);
  size_t bf16_steps = 0;
  std::string labels;
  for (const auto& l : StepLabels(**e16, inputs)) {
    labels += l + "\n";
    if (l.find("Conv") != std::string::npos && l.find("bf16") != std::string::npos) ++bf16_steps;
  }
  if (static_cast<int>(ActiveIsa()) >= static_cast<int>(Isa::kAvx512Bf16)) {
    EXPECT_EQ(bf16_steps, 3u) << labels;  // oneDNN's BF16 kernels (amx_bf16 / avx512_core_bf16)
    // conv1's result (r1) is read only by conv2: it is stored in BF16, so conv2 needs no conversion
    // (x, read by conv1 and the shortcut, is converted once and shared).
    EXPECT_EQ(labels.find("reorder r1"), std::string::npos) << labels;
    EXPECT_NE(labels.find("reorder x"), std::string::npos) << labels;
    EXPECT_GT(rel, 0.0);  // BF16 operands: not the FP32 bits
    EXPECT_LT(rel, 1e-2) << labels;
  } else {
    EXPECT_EQ(bf16_steps, 0u) << labels;
    EXPECT_LT(rel, 1e-6);  // FP32 kernels run the BF16 layers on this CPU
    GTEST_SKIP() << "this CPU (" << IsaName(ActiveIsa()) << ") has no AVX512-BF16: BF16 layers ran in FP32";
  }
}

}  // namespace
}  // namespace sampan::cpu::testing
