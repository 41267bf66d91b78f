// dead_node_elimination: unused nodes (and chains of them) go; anything feeding
// a graph output or a live node stays.
#include "passes/pass_test_util.h"

namespace sampan::passes::testing {
namespace {

const char* kDeadChain = R"(
  opset 17
  graph g (x: f32[2,3]) -> (y) {
    y = Relu(x) @live
    t = Sigmoid(x) @dead1
    u = Tanh(t) @dead2
    v = Neg(u) @dead3
  }
)";

TEST(DeadNodeElimination, RemovesUnusedChain) {
  PassRun run;
  auto g = ParseAndRun(kDeadChain, {"dead_node_elimination"}, &run);
  EXPECT_EQ(Nodes(*g), "y = Relu(x) @live");
  EXPECT_EQ(run.rewrites.size(), 3u);
  EXPECT_EQ(g->FindValue("t"), nullptr) << "unused values are dropped too";
}

TEST(DeadNodeElimination, Numerics) {
  std::string s = CheckNumerics(kDeadChain, {"dead_node_elimination"});
  EXPECT_EQ(s.find("Sigmoid"), std::string::npos) << s;
}

TEST(DeadNodeElimination, KeepsMultiOutputNodeWithOneLiveOutput) {
  auto g = ParseAndRun(R"(
    opset 17
    graph g (x: f32[4,6]) -> (y) {
      a, b = Split(x) {axis=1} @split
      y = Relu(a) @r
    }
  )",
                       {"dead_node_elimination"});
  EXPECT_EQ(Nodes(*g), "a, b = Split(x) {axis=1} @split\ny = Relu(a) @r");
}

TEST(DeadNodeElimination, NothingToDoLeavesGraphUnchanged) {
  const char* text = R"(
    opset 17
    graph g (x: f32[2]) -> (y, z) {
      y = Relu(x) @a
      z = Neg(y) @b
    }
  )";
  auto g = MustParse(text);
  const std::string before = ir::PrintGraph(*g);
  PassRun run = RunPasses(*g, {"dead_node_elimination"});
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  EXPECT_EQ(ir::PrintGraph(*g), before);
  ASSERT_FALSE(run.stats.empty());
  for (const auto& s : run.stats) {
    if (s.name == "dead_node_elimination") {
      EXPECT_FALSE(s.changed);
    }
  }
}

}  // namespace
}  // namespace sampan::passes::testing
