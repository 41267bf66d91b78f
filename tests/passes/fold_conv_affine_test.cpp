// fold_conv_affine: per-channel Mul/Add constants after a Conv fold into its weights and bias.
#include "passes/pass_test_util.h"

namespace sampan::passes::testing {
namespace {

std::string Net(const std::string& stmts) {
  return R"(
    opset 17
    graph g (x: f32[1,3,6,6]) -> (y) {
      w = const f32[4,3,3,3] random
      b = const f32[4] random
      c = Conv(x, w, b) {pads=[1, 1, 1, 1]} @conv
      nb = const f32[3,3,3,3] random
      s = const f32[4,1,1] {0.5, -1.5, 2, 0.25}
      s4 = const f32[1,4,1,1] {1, 2, 3, 4}
      a = const f32[4,1,1] {0.1, 0.2, -0.3, 4}
      k = const f32[] {3}
      per_x = const f32[1,1,1,6] {1, 2, 3, 4, 5, 6}
)" + stmts +
         "\n    }\n";
}

TEST(FoldConvAffine, ScaleThenShiftFoldIntoTheConv) {
  const std::string text = Net(R"(
      m = Mul(s, c) @scale
      y = Add(m, a) @shift)");
  PassRun run;
  auto g = ParseAndRun(text, {"fold_conv_affine", "dead_node_elimination"}, &run);
  EXPECT_EQ(run.rewrites.size(), 2u);
  EXPECT_EQ(g->nodes().size(), 1u) << Nodes(*g);
  EXPECT_EQ(g->nodes()[0]->op_type, "Conv");
  EXPECT_EQ(g->nodes()[0]->output(0)->name(), "y");
  CheckNumerics(text, {"fold_conv_affine", "dead_node_elimination"});
}

TEST(FoldConvAffine, ScalarAndRank4ConstantsAndConvWithoutBias) {
  for (const char* stmts : {"y = Mul(c, k) @scale", "y = Add(c, s4) @shift",
                            "d = Conv(x, nb) {pads=[1, 1, 1, 1]} @conv2\n y = Add(d, k) @shift"}) {
    PassRun run;
    auto g = ParseAndRun(Net(stmts), {"fold_conv_affine", "dead_node_elimination"}, &run);
    size_t folded = 0;
    for (const auto& r : run.rewrites) folded += r.pass == "fold_conv_affine";
    EXPECT_EQ(folded, 1u) << stmts << "\n" << Nodes(*g);
    CheckNumerics(Net(stmts), {"fold_conv_affine", "dead_node_elimination"});
  }
}

TEST(FoldConvAffine, IntoConvTranspose) {
  // Paddle's exporter writes a ConvTranspose's bias as an Add of a [C,1,1] constant; a scale
  // folds too. Grouped (2 groups of 2 output channels) to test the weight index math.
  const std::string text = R"(
    opset 17
    graph g (x: f32[1,4,3,3]) -> (y) {
      w = const f32[4,2,2,2] random
      c = ConvTranspose(x, w) {group=2, strides=[2, 2]} @deconv
      s = const f32[4,1,1] {0.5, -1.5, 2, 0.25}
      a = const f32[4,1,1] {0.1, 0.2, -0.3, 4}
      m = Mul(c, s) @scale
      y = Add(m, a) @shift
    }
  )";
  PassRun run;
  auto g = ParseAndRun(text, {"fold_conv_affine", "dead_node_elimination"}, &run);
  EXPECT_EQ(run.rewrites.size(), 2u);
  EXPECT_EQ(OpList(*g), "ConvTranspose") << Nodes(*g);
  CheckNumerics(text, {"fold_conv_affine", "dead_node_elimination"});
}

TEST(FoldConvAffine, BiasAddThenBatchNormAfterConvTranspose) {
  // The PP-OCR detector's head: ConvTranspose, its bias as an Add, then BatchNormalization.
  // fold_batchnorm runs first and sees the Add between; this pass folds both.
  const std::string text = R"(
    opset 17
    graph g (x: f32[1,4,3,3]) -> (y) {
      w = const f32[4,3,2,2] random
      c = ConvTranspose(x, w) {strides=[2, 2]} @deconv
      a = const f32[3,1,1] {0.1, 0.2, -0.3}
      scale = const f32[3] {1, 2, 3}
      bias = const f32[3] {-1, 0, 1}
      mean = const f32[3] {0.5, 0.25, -0.25}
      var = const f32[3] {2, 0.5, 1}
      d = Add(c, a) @bias_add
      y = BatchNormalization(d, scale, bias, mean, var) @bn
    }
  )";
  PassRun run;
  auto g = ParseAndRun(text, {"fold_batchnorm", "fold_conv_affine", "dead_node_elimination"}, &run);
  EXPECT_EQ(OpList(*g), "ConvTranspose") << Nodes(*g);
  CheckNumerics(text, {"fold_batchnorm", "fold_conv_affine", "dead_node_elimination"});
}

TEST(FoldConvAffine, LeavesOtherBroadcastsAndSharedConvsAlone) {
  for (const char* stmts : {
           "y = Mul(c, per_x) @scale",                   // varies along width, not per channel
           "m = Mul(c, s) @scale\n y = Add(m, c) @res",  // the conv output has a second reader
       }) {
    PassRun run;
    auto g = ParseAndRun(Net(stmts), {"fold_conv_affine"}, &run);
    EXPECT_TRUE(run.rewrites.empty()) << stmts << "\n" << Nodes(*g);
  }
}

}  // namespace
}  // namespace sampan::passes::testing
