// fuse_activation: Conv/Gemm/MatMul followed by an activation -> one sampan::Fused* node.
#include "passes/pass_test_util.h"

namespace sampan::passes::testing {
namespace {

// A conv whose output feeds `act_stmts` (which define y from c).
std::string ConvThen(const std::string& act_stmts) {
  return R"(
    opset 17
    graph g (x: f32[1,3,6,6]) -> (y) {
      w = const f32[4,3,3,3] random
      b = const f32[4] random
      c = Conv(x, w, b) {pads=[1, 1, 1, 1]} @conv
)" + act_stmts +
         "\n    }\n";
}

struct Case {
  const char* name;
  std::string stmts;
  std::string expected_attrs;  // attributes of the fused node
};

class ConvActivation : public ::testing::TestWithParam<Case> {};

TEST_P(ConvActivation, Fuses) {
  const Case& c = GetParam();
  const std::string text = ConvThen(c.stmts);
  PassRun run;
  auto g = ParseAndRun(text, {"fuse_activation"}, &run);
  EXPECT_EQ(Nodes(*g), "y = sampan::FusedConv(x, w, b) {" + c.expected_attrs + "} @conv");
  EXPECT_EQ(OutputNames(*g), std::vector<std::string>{"y"});
  ASSERT_EQ(run.rewrites.size(), 1u);
  EXPECT_NE(run.rewrites[0].description.find("conv"), std::string::npos);
  CheckNumerics(text, {"fuse_activation"});
}

INSTANTIATE_TEST_SUITE_P(
    Activations, ConvActivation,
    ::testing::Values(
        Case{"Relu", "y = Relu(c) @act", "activation=\"Relu\", pads=[1, 1, 1, 1]"},
        Case{"Relu6ClipInputs", "lo = const f32[] {0}\n hi = const f32[] {6}\n y = Clip(c, lo, hi) @act",
             "activation=\"Clip\", activation_params=[0.0, 6.0], pads=[1, 1, 1, 1]"},
        Case{"SiLU", "s = Sigmoid(c) @sig\n y = Mul(c, s) @mul", "activation=\"SiLU\", pads=[1, 1, 1, 1]"},
        Case{"SiLUSwapped", "s = Sigmoid(c) @sig\n y = Mul(s, c) @mul", "activation=\"SiLU\", pads=[1, 1, 1, 1]"},
        Case{"HardSwish", "y = HardSwish(c) @act", "activation=\"HardSwish\", pads=[1, 1, 1, 1]"},
        Case{"Sigmoid", "y = Sigmoid(c) @act", "activation=\"Sigmoid\", pads=[1, 1, 1, 1]"},
        Case{"LeakyRelu", "y = LeakyRelu(c) {alpha=0.2} @act",
             "activation=\"LeakyRelu\", activation_params=[0.2], pads=[1, 1, 1, 1]"},
        Case{"LeakyReluDefaultAlpha", "y = LeakyRelu(c) @act",
             "activation=\"LeakyRelu\", activation_params=[0.01], pads=[1, 1, 1, 1]"},
        Case{"HardSigmoid", "y = HardSigmoid(c) @act",
             "activation=\"HardSigmoid\", activation_params=[0.2, 0.5], pads=[1, 1, 1, 1]"},
        Case{"Tanh", "y = Tanh(c) @act", "activation=\"Tanh\", pads=[1, 1, 1, 1]"}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

const char* kGemmRelu = R"(
  opset 17
  graph g (a: f32[3,5]) -> (y) {
    w = const f32[4,5] random
    bias = const f32[4] random
    m = Gemm(a, w, bias) {transB=1} @fc
    y = Relu(m) @relu
  }
)";

TEST(FuseActivation, GemmRelu) {
  auto g = ParseAndRun(kGemmRelu, {"fuse_activation"});
  EXPECT_EQ(Nodes(*g), "y = sampan::FusedGemm(a, w, bias) {activation=\"Relu\", transB=1} @fc");
  CheckNumerics(kGemmRelu, {"fuse_activation"});
}

const char* kMatMulBiasRelu = R"(
  opset 17
  graph g (x: f32[2,3,5]) -> (y) {
    w = const f32[5,4] random
    bias = const f32[4] random
    m = MatMul(x, w) @mm
    s = Add(m, bias) @add
    y = Relu(s) @relu
  }
)";

TEST(FuseActivation, MatMulAddReluIntoOneFusedMatMul) {
  auto g = ParseAndRun(kMatMulBiasRelu, {"fuse_matmul_add", "fuse_activation"});
  EXPECT_EQ(Nodes(*g), "y = sampan::FusedMatMul(x, w, bias_1d) {activation=\"Relu\"} @mm");
  CheckNumerics(kMatMulBiasRelu, {"fuse_matmul_add", "fuse_activation"});
}

TEST(FuseActivation, MatMul2dAddReluIntoFusedGemm) {
  const char* text = R"(
    opset 17
    graph g (x: f32[3,5]) -> (y) {
      w = const f32[5,4] random
      bias = const f32[4] random
      m = MatMul(x, w) @mm
      s = Add(m, bias) @add
      y = Relu(s) @relu
    }
  )";
  auto g = ParseAndRun(text, {"fuse_matmul_add", "fuse_activation"});
  EXPECT_EQ(Nodes(*g), "y = sampan::FusedGemm(x, w, bias_1d) {activation=\"Relu\"} @mm");
  CheckNumerics(text, {"fuse_matmul_add", "fuse_activation"});
}

TEST(FuseActivation, NotWhenConvOutputIsGraphOutput) {
  auto g = ParseAndRun(R"(
    opset 17
    graph g (x: f32[1,1,3,3]) -> (c, y) {
      w = const f32[1,1,1,1] {2}
      c = Conv(x, w) @conv
      y = Relu(c) @relu
    }
  )",
                       {"fuse_activation"});
  EXPECT_EQ(OpList(*g), "Conv,Relu");
}

TEST(FuseActivation, NotWhenConvOutputHasTwoReaders) {
  auto g = ParseAndRun(R"(
    opset 17
    graph g (x: f32[1,1,3,3]) -> (y, z) {
      w = const f32[1,1,1,1] {2}
      c = Conv(x, w) @conv
      y = Relu(c) @relu
      z = Neg(c) @neg
    }
  )",
                       {"fuse_activation"});
  EXPECT_EQ(OpList(*g), "Conv,Relu,Neg");
}

TEST(FuseActivation, NotWhenSigmoidOutputIsAlsoUsed) {
  // Mul(c, Sigmoid(c)) where the sigmoid is a graph output too: not a SiLU.
  auto g = ParseAndRun(R"(
    opset 17
    graph g (x: f32[1,1,3,3]) -> (y, s) {
      w = const f32[1,1,1,1] {2}
      c = Conv(x, w) @conv
      s = Sigmoid(c) @sig
      y = Mul(c, s) @mul
    }
  )",
                       {"fuse_activation"});
  EXPECT_EQ(OpList(*g), "Conv,Sigmoid,Mul");
}

TEST(FuseActivation, ClipWithNonConstantBoundsNotFused) {
  auto g = ParseAndRun(R"(
    opset 17
    graph g (x: f32[1,1,3,3], hi: f32[]) -> (y) {
      w = const f32[1,1,1,1] {2}
      c = Conv(x, w) @conv
      lo = const f32[] {0}
      y = Clip(c, lo, hi) @clip
    }
  )",
                       {"fuse_activation"});
  EXPECT_EQ(OpList(*g), "Conv,Clip");
}

TEST(FuseActivation, OnlyOneActivationPerNode) {
  // Relu then Sigmoid: the first fuses, the second stays a separate node.
  const char* text = R"(
    opset 17
    graph g (x: f32[1,2,4,4]) -> (y) {
      w = const f32[2,2,1,1] random
      c = Conv(x, w) @conv
      r = Relu(c) @relu
      y = Sigmoid(r) @sig
    }
  )";
  auto g = ParseAndRun(text, {"fuse_activation"});
  EXPECT_EQ(OpList(*g), "sampan::FusedConv,Sigmoid");
  CheckNumerics(text, {"fuse_activation"});
}

}  // namespace
}  // namespace sampan::passes::testing
