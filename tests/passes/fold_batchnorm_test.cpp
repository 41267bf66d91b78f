// fold_batchnorm: inference BatchNormalization folded into the Conv / Gemm before it.
#include "passes/pass_test_util.h"

namespace sampan::passes::testing {
namespace {

const char* kConvBn = R"(
  opset 17
  graph g (x: f32[2,3,7,7]) -> (y) {
    w = const f32[4,3,3,3] random
    b = const f32[4] random
    c = Conv(x, w, b) {pads=[1, 1, 1, 1]} @conv1
    scale = const f32[4] {0.5, 1.5, -2, 1}
    bias = const f32[4] {0.1, -0.2, 0.3, 0}
    mean = const f32[4] {0.2, -0.5, 0, 1}
    var = const f32[4] {0.25, 1, 4, 0.01}
    y = BatchNormalization(c, scale, bias, mean, var) {epsilon=0.001} @bn1
  }
)";

TEST(FoldBatchNorm, IntoConv) {
  PassRun run;
  auto g = ParseAndRun(kConvBn, {"fold_batchnorm"}, &run);
  EXPECT_EQ(Nodes(*g), "y = Conv(x, w_bnfolded, conv1_bias_bnfolded) {pads=[1, 1, 1, 1]} @conv1");
  EXPECT_EQ(OutputNames(*g), std::vector<std::string>{"y"});
  ASSERT_EQ(run.rewrites.size(), 1u);
  EXPECT_NE(run.rewrites[0].description.find("bn1"), std::string::npos) << run.rewrites[0].description;
  EXPECT_NE(run.rewrites[0].description.find("conv1"), std::string::npos) << run.rewrites[0].description;
  // The old weights and BN parameters are gone.
  EXPECT_EQ(g->FindValue("w"), nullptr);
  EXPECT_EQ(g->FindValue("var"), nullptr);
  // Bias: (b - mean) * scale / sqrt(var + eps) + bias for channel 3.
  auto orig = MustParse(kConvBn);
  const float b3 = orig->FindValue("b")->data.data<float>()[3];
  const float expect = (b3 - 1.f) * 1.f / std::sqrt(0.01f + 0.001f) + 0.f;
  EXPECT_NEAR(g->FindValue("conv1_bias_bnfolded")->data.data<float>()[3], expect, 1e-5 * (1 + std::fabs(expect)));
}

TEST(FoldBatchNorm, IntoConvNumerics) {
  CheckNumerics(kConvBn, {"fold_batchnorm"});
}

TEST(FoldBatchNorm, IntoGroupedConvWithoutBias) {
  // Depthwise conv without a bias.
  const std::string text = R"(
    opset 17
    graph g (x: f32[1,3,5,5]) -> (y) {
      w = const f32[3,1,3,3] random
      c = Conv(x, w) {group=3, strides=[2, 2]} @conv
      scale = const f32[3] {1, 2, 3}
      bias = const f32[3] {-1, 0, 1}
      mean = const f32[3] {0.5, 0.25, -0.25}
      var = const f32[3] {2, 0.5, 1}
      y = BatchNormalization(c, scale, bias, mean, var) @bn
    }
  )";
  auto g = ParseAndRun(text, {"fold_batchnorm"});
  EXPECT_EQ(OpList(*g), "Conv");
  ASSERT_EQ(g->nodes()[0]->num_inputs(), 3u) << "the folded conv gains a bias";
  CheckNumerics(text, {"fold_batchnorm"});
}

TEST(FoldBatchNorm, IntoConvTranspose) {
  // Grouped ConvTranspose: weight [C=4, M/g=3, 2, 2] with 2 groups, so output channel
  // 3 * (i / 2) + j takes row j of input channel i (the index math the fold must get right).
  for (const char* conv : {"ConvTranspose(x, w) {group=2, strides=[2, 2]} @deconv",
                           "ConvTranspose(x, w, b) {group=2, strides=[2, 2], pads=[0, 1, 0, 1]} @deconv"}) {
    const std::string text = std::string(R"(
      opset 17
      graph g (x: f32[1,4,3,3]) -> (y) {
        w = const f32[4,3,2,2] random
        b = const f32[6] random
        scale = const f32[6] {1, 2, 3, -1, 0.5, 0.25}
        bias = const f32[6] {-1, 0, 1, 2, 0.5, -0.5}
        mean = const f32[6] {0.5, 0.25, -0.25, 0, 1, 2}
        var = const f32[6] {2, 0.5, 1, 0.1, 3, 4}
        c = )") + conv + R"(
        y = BatchNormalization(c, scale, bias, mean, var) @bn
      }
    )";
    auto g = ParseAndRun(text, {"fold_batchnorm"});
    EXPECT_EQ(OpList(*g), "ConvTranspose") << conv;
    ASSERT_EQ(g->nodes()[0]->num_inputs(), 3u) << "the folded ConvTranspose has a bias";
    CheckNumerics(text, {"fold_batchnorm"});
  }
}

const char* kGemmBn = R"(
  opset 17
  graph g (a: f32[3,5]) -> (y) {
    w = const f32[5,4] random
    c0 = const f32[4] random
    m = Gemm(a, w, c0) @fc
    scale = const f32[4] {0.5, 1.5, -2, 1}
    bias = const f32[4] {0.1, -0.2, 0.3, 0}
    mean = const f32[4] {0.2, -0.5, 0, 1}
    var = const f32[4] {0.25, 1, 4, 0.01}
    y = BatchNormalization(m, scale, bias, mean, var) @bn
  }
)";

TEST(FoldBatchNorm, IntoGemm) {
  auto g = ParseAndRun(kGemmBn, {"fold_batchnorm"});
  EXPECT_EQ(Nodes(*g), "y = Gemm(a, w_bnfolded, fc_bias_bnfolded) @fc");
  CheckNumerics(kGemmBn, {"fold_batchnorm"});
}

TEST(FoldBatchNorm, IntoGemmTransBNoBias) {
  const char* text = R"(
    opset 17
    graph g (a: f32[3,5]) -> (y) {
      w = const f32[4,5] random
      m = Gemm(a, w) {transB=1} @fc
      scale = const f32[4] {0.5, 1.5, -2, 1}
      bias = const f32[4] {0.1, -0.2, 0.3, 0}
      mean = const f32[4] {0.2, -0.5, 0, 1}
      var = const f32[4] {0.25, 1, 4, 0.01}
      y = BatchNormalization(m, scale, bias, mean, var) @bn
    }
  )";
  auto g = ParseAndRun(text, {"fold_batchnorm"});
  EXPECT_EQ(Nodes(*g), "y = Gemm(a, w_bnfolded, fc_bias_bnfolded) {transB=1} @fc");
  CheckNumerics(text, {"fold_batchnorm"});
}

TEST(FoldBatchNorm, NotWhenConvOutputHasAnotherUse) {
  const char* text = R"(
    opset 17
    graph g (x: f32[1,2,4,4]) -> (y, z) {
      w = const f32[2,2,1,1] random
      c = Conv(x, w) @conv
      scale = const f32[2] {1, 2}
      bias = const f32[2] {0, 1}
      mean = const f32[2] {0, 0}
      var = const f32[2] {1, 1}
      y = BatchNormalization(c, scale, bias, mean, var) @bn
      z = Relu(c) @relu
    }
  )";
  auto g = ParseAndRun(text, {"fold_batchnorm"});
  EXPECT_EQ(OpList(*g), "Conv,BatchNormalization,Relu");
}

TEST(FoldBatchNorm, NotWhenStatisticsAreInputs) {
  auto g = ParseAndRun(R"(
    opset 17
    graph g (x: f32[1,2,4,4], mean: f32[2]) -> (y) {
      w = const f32[2,2,1,1] random
      c = Conv(x, w) @conv
      scale = const f32[2] {1, 2}
      bias = const f32[2] {0, 1}
      var = const f32[2] {1, 1}
      y = BatchNormalization(c, scale, bias, mean, var) @bn
    }
  )",
                       {"fold_batchnorm"});
  EXPECT_EQ(OpList(*g), "Conv,BatchNormalization");
}

TEST(FoldBatchNorm, NotIntoGemmWithPerRowBias) {
  // C [4,1] broadcasts along rows (one value per row of A), not per output
  // column: it has 4 elements like the 4 channels, but folding it would be wrong.
  const char* text = R"(
    opset 17
    graph g (a: f32[4,5]) -> (y) {
      w = const f32[5,4] random
      c0 = const f32[4,1] {1, -2, 3, -4}
      m = Gemm(a, w, c0) @fc
      scale = const f32[4] {0.5, 1.5, -2, 1}
      bias = const f32[4] {0.1, -0.2, 0.3, 0}
      mean = const f32[4] {0.2, -0.5, 0, 1}
      var = const f32[4] {0.25, 1, 4, 0.01}
      y = BatchNormalization(m, scale, bias, mean, var) @bn
    }
  )";
  CheckNumerics(text, {"fold_batchnorm"});
}

TEST(FoldBatchNorm, IntoGemmWithRowVectorBias) {
  const char* text = R"(
    opset 17
    graph g (a: f32[3,5]) -> (y) {
      w = const f32[5,4] random
      c0 = const f32[1,4] {1, -2, 3, -4}
      m = Gemm(a, w, c0) @fc
      scale = const f32[4] {0.5, 1.5, -2, 1}
      bias = const f32[4] {0.1, -0.2, 0.3, 0}
      mean = const f32[4] {0.2, -0.5, 0, 1}
      var = const f32[4] {0.25, 1, 4, 0.01}
      y = BatchNormalization(m, scale, bias, mean, var) @bn
    }
  )";
  auto g = ParseAndRun(text, {"fold_batchnorm"});
  EXPECT_EQ(OpList(*g), "Gemm");
  CheckNumerics(text, {"fold_batchnorm"});
}

}  // namespace
}  // namespace sampan::passes::testing
