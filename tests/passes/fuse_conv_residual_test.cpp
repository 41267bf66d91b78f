// fuse_conv_residual: Add(Conv(x), r) -> sampan::FusedConv(x, W, B, r); a Relu
// after it then fuses on top (fuse_activation).
#include "passes/pass_test_util.h"

namespace sampan::passes::testing {
namespace {

const char* kResidual = R"(
  opset 17
  graph g (x: f32[1,4,6,6]) -> (y) {
    w1 = const f32[4,4,3,3] random
    b1 = const f32[4] random
    h = Conv(x, w1, b1) {pads=[1, 1, 1, 1]} @conv1
    a = Relu(h) @relu1
    w2 = const f32[4,4,3,3] random
    c = Conv(a, w2) {pads=[1, 1, 1, 1]} @conv2
    s = Add(x, c) @add
    y = Relu(s) @relu2
  }
)";

TEST(FuseConvResidual, AddIntoFusedConv) {
  PassRun run;
  auto g = ParseAndRun(kResidual, {"fuse_conv_residual"}, &run);
  EXPECT_EQ(Nodes(*g),
            "h = Conv(x, w1, b1) {pads=[1, 1, 1, 1]} @conv1\n"
            "a = Relu(h) @relu1\n"
            "s = sampan::FusedConv(a, w2, _, x) {pads=[1, 1, 1, 1]} @conv2\n"
            "y = Relu(s) @relu2");
  ASSERT_EQ(run.rewrites.size(), 1u);
  EXPECT_NE(run.rewrites[0].description.find("conv2"), std::string::npos);
}

TEST(FuseConvResidual, AddNumerics) {
  CheckNumerics(kResidual, {"fuse_conv_residual"});
}

TEST(FuseConvResidual, WithReluOnTop) {
  auto g = ParseAndRun(kResidual, {"fuse_conv_residual", "fuse_activation"});
  EXPECT_EQ(Nodes(*g),
            "a = sampan::FusedConv(x, w1, b1) {activation=\"Relu\", pads=[1, 1, 1, 1]} @conv1\n"
            "y = sampan::FusedConv(a, w2, _, x) {activation=\"Relu\", pads=[1, 1, 1, 1]} @conv2");
  EXPECT_EQ(OutputNames(*g), std::vector<std::string>{"y"});
  CheckNumerics(kResidual, {"fuse_conv_residual", "fuse_activation"});
}

TEST(FuseConvResidual, BothOperandsConvs) {
  // Add(conv_a(x), conv_b(x)): one of the convs absorbs the add, the other is the residual.
  const char* text = R"(
    opset 17
    graph g (x: f32[1,2,5,5]) -> (y) {
      wa = const f32[3,2,1,1] random
      wb = const f32[3,2,3,3] random
      bb = const f32[3] random
      ca = Conv(x, wa) @conv_a
      cb = Conv(x, wb, bb) {pads=[1, 1, 1, 1]} @conv_b
      y = Add(ca, cb) @add
    }
  )";
  auto g = ParseAndRun(text, {"fuse_conv_residual"});
  EXPECT_EQ(OpList(*g), "Conv,sampan::FusedConv");
  CheckNumerics(text, {"fuse_conv_residual"});
}

TEST(FuseConvResidual, NotWhenResidualBroadcasts) {
  const char* text = R"(
    opset 17
    graph g (x: f32[1,2,4,4], r: f32[1,2,1,1]) -> (y) {
      w = const f32[2,2,1,1] random
      c = Conv(x, w) @conv
      y = Add(c, r) @add
    }
  )";
  auto g = ParseAndRun(text, {"fuse_conv_residual"});
  EXPECT_EQ(OpList(*g), "Conv,Add");
}

TEST(FuseConvResidual, SymbolicBatchFuses) {
  // A dynamic batch ("N" on every operand) is still the same shape: dynamic plans fuse too.
  const char* text = R"(
    opset 17
    graph g (x: f32[N,2,4,4]) -> (y) {
      w = const f32[2,2,3,3] random
      c = Conv(x, w) {pads=[1, 1, 1, 1]} @conv
      y = Add(c, x) @add
    }
  )";
  auto g = ParseAndRun(text, {"fuse_conv_residual"});
  EXPECT_EQ(OpList(*g), "sampan::FusedConv");
}

TEST(FuseConvResidual, NotWhenDimsAreAnonymousOrDifferentSymbols) {
  // '?' sizes may differ at run time, and so may two different symbols.
  for (const char* shapes : {"x: f32[?,2,4,4], r: f32[?,2,4,4]", "x: f32[N,2,4,4], r: f32[M,2,4,4]"}) {
    const std::string text = std::string(R"(
    opset 17
    graph g ()") + shapes + R"() -> (y) {
      w = const f32[2,2,3,3] random
      c = Conv(x, w) {pads=[1, 1, 1, 1]} @conv
      y = Add(c, r) @add
    }
  )";
    auto g = ParseAndRun(text, {"fuse_conv_residual"});
    EXPECT_EQ(OpList(*g), "Conv,Add") << shapes;
  }
}

TEST(FuseConvResidual, NotWhenConvOutputIsUsedElsewhere) {
  const char* text = R"(
    opset 17
    graph g (x: f32[1,2,4,4]) -> (y, c) {
      w = const f32[2,2,1,1] random
      c = Conv(x, w) @conv
      y = Add(c, x) @add
    }
  )";
  auto g = ParseAndRun(text, {"fuse_conv_residual"});
  EXPECT_EQ(OpList(*g), "Conv,Add");
}

}  // namespace
}  // namespace sampan::passes::testing
