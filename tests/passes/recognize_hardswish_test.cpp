// recognize_hardswish: x * clip(x + 3, 0, 6) / 6 (and x * HardSigmoid(x, 1/6, 0.5)) -> HardSwish,
// which fuse_activation then puts into the conv.
#include "passes/pass_test_util.h"

namespace sampan::passes::testing {
namespace {

std::string ConvThen(const std::string& stmts) {
  return R"(
    opset 17
    graph g (x: f32[1,3,6,6]) -> (y) {
      w = const f32[4,3,3,3] random
      b = const f32[4] random
      c = Conv(x, w, b) {pads=[1, 1, 1, 1]} @conv
      three = const f32[] {3}
      zero = const f32[] {0}
      six = const f32[] {6}
      sixth = const f32[] {0.16666667}
)" + stmts +
         "\n    }\n";
}

TEST(RecognizeHardSwish, PaddleFormFusesIntoTheConv) {
  const std::string text = ConvThen(R"(
      a = Add(c, three) @add
      k = Clip(a, zero, six) @clip
      m = Mul(c, k) @mul
      y = Div(m, six) @div)");
  PassRun run;
  auto g = ParseAndRun(text, {"recognize_hardswish", "fuse_activation", "dead_node_elimination"}, &run);
  EXPECT_EQ(Nodes(*g), "y = sampan::FusedConv(x, w, b) {activation=\"HardSwish\", pads=[1, 1, 1, 1]} @conv");
  CheckNumerics(text, {"recognize_hardswish", "fuse_activation", "dead_node_elimination"});
}

TEST(RecognizeHardSwish, VariantsAreRecognised) {
  for (const char* stmts : {
           "a = Add(three, c) @add\n k = Clip(a, zero, six) @clip\n m = Mul(k, c) @mul\n y = Mul(m, sixth) @s",
           "k = HardSigmoid(c) {alpha=0.16666667, beta=0.5} @hs\n y = Mul(c, k) @mul",
       }) {
    PassRun run;
    auto g = ParseAndRun(ConvThen(stmts), {"recognize_hardswish"}, &run);
    EXPECT_NE(Nodes(*g).find("HardSwish(c)"), std::string::npos) << stmts << "\n" << Nodes(*g);
    CheckNumerics(ConvThen(stmts), {"recognize_hardswish"});
  }
}

TEST(RecognizeHardSwish, LeavesOtherShapesAlone) {
  for (const char* stmts : {
           // clip to 0..5 is not HardSwish
           "five = const f32[] {5}\n a = Add(c, three) @add\n k = Clip(a, zero, five) @clip\n m = Mul(c, k) @mul\n "
           "y = Div(m, six) @div",
           // the intermediate escapes as a second reader
           "a = Add(c, three) @add\n k = Clip(a, zero, six) @clip\n m = Mul(c, k) @mul\n d = Div(m, six) @div\n "
           "y = Add(d, k) @other",
       }) {
    PassRun run;
    auto g = ParseAndRun(ConvThen(stmts), {"recognize_hardswish"}, &run);
    EXPECT_EQ(Nodes(*g).find("HardSwish"), std::string::npos) << stmts;
    EXPECT_TRUE(run.rewrites.empty());
  }
}

}  // namespace
}  // namespace sampan::passes::testing
