// The determinism trait of the op registry: which ops draw random numbers, and
// ops::IsNondeterministic on nodes (Dropout's training mode, unknown ops).
#include <gtest/gtest.h>

#include "ir/text.h"
#include "ops/draw_test_op.h"
#include "ops/op.h"
#include "ops/run_node.h"

namespace sampan::ops {
namespace {

std::unique_ptr<ir::Graph> MustParse(const std::string& text) {
  auto g = ir::ParseGraph(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString() << "\n" << text;
  return g.ok() ? std::move(g).value() : std::make_unique<ir::Graph>();
}

const ir::Node& NodeNamed(const ir::Graph& g, const std::string& name) {
  for (const auto& n : g.nodes())
    if (n->name == name) return *n;
  ADD_FAILURE() << "no node " << name;
  return *g.nodes().front();
}

TEST(Determinism, RandomOpsAreFlaggedInTheRegistry) {
  for (const char* op :
       {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial"}) {
    const OpDef* def = FindOp("", op);
    ASSERT_NE(def, nullptr) << op;
    EXPECT_EQ(def->determinism, Determinism::kRandom) << op;
  }
  EXPECT_EQ(FindOp("", "Dropout")->determinism, Determinism::kRandomInTraining);
  for (const char* op : {"Relu", "Add", "Shape", "ConstantOfShape", "Range", "Identity"})
    EXPECT_EQ(FindOp("", op)->determinism, Determinism::kDeterministic) << op;
}

TEST(Determinism, EveryRandomOpIsNondeterministicAsANode) {
  int random_ops = 0;
  for (const OpDef* def : AllOps()) {
    if (def->determinism != Determinism::kRandom) continue;
    ++random_ops;
    ir::Graph g;
    auto y = g.AddValue("y");
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    auto node = g.AddNode(def->op_type, {}, {*y}, "n");
    ASSERT_TRUE(node.ok()) << node.status().ToString();
    (*node)->domain = def->domain;
    EXPECT_TRUE(IsNondeterministic(**node)) << def->op_type;
  }
  EXPECT_GE(random_ops, 6);
}

TEST(Determinism, RandomOpsAreUnsupportedNotWrong) {
  // Registered for their trait, they still tell a model that uses them what is missing.
  auto g = MustParse(R"(
    opset 17
    graph g (x: f32[4]) -> (y) {
      y = RandomUniformLike(x) @draw
    }
  )");
  Status st = InferTypes(*g);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.ToString();
  EXPECT_NE(st.message().find("RandomUniformLike 'draw': random number generation"), std::string::npos)
      << st.ToString();
}

TEST(Determinism, DropoutIsRandomOnlyWhenTrainingMayBeOn) {
  auto g = MustParse(R"(
    opset 17
    graph g (x: f32[4], training: bool[]) -> (a, b, c, d) {
      ratio = const f32[] {0.5}
      off = const bool[] {0}
      on = const bool[] {1}
      a = Dropout(x) @no_training_input
      b = Dropout(x, ratio, off) @constant_off
      c = Dropout(x, ratio, on) @constant_on
      d = Dropout(x, ratio, training) @graph_input
    }
  )");
  EXPECT_FALSE(IsNondeterministic(NodeNamed(*g, "no_training_input")));
  EXPECT_FALSE(IsNondeterministic(NodeNamed(*g, "constant_off")));
  EXPECT_TRUE(IsNondeterministic(NodeNamed(*g, "constant_on")));
  EXPECT_TRUE(IsNondeterministic(NodeNamed(*g, "graph_input")));
}

TEST(Determinism, UnknownOpsCountAsNondeterministic) {
  auto g = MustParse(R"(
    opset 17
    graph g (x: f32[4]) -> (y, z) {
      y = NoSuchOp(x) @unknown
      z = Relu(x) @relu
    }
  )");
  EXPECT_TRUE(IsNondeterministic(NodeNamed(*g, "unknown")));
  EXPECT_FALSE(IsNondeterministic(NodeNamed(*g, "relu")));
}

TEST(Determinism, InferTypesDoesNotFoldARandomDraw) {
  ASSERT_TRUE(testing::kDrawRegistered);
  // Both Draw nodes have all their (zero) inputs known: a deterministic op would be
  // evaluated so later inference sees its value. A draw must not be: Equal(a, b)
  // would otherwise get a known value.
  auto g = MustParse(R"(
    opset 17
    graph g () -> (e) {
      a = sampan.test::Draw() @draw1
      b = sampan.test::Draw() @draw2
      e = Equal(a, b) @equal
    }
  )");
  const int64_t before = testing::g_draws;
  ASSERT_TRUE(InferTypes(*g).ok());
  EXPECT_EQ(testing::g_draws, before) << "a draw was run while inferring types";
  EXPECT_EQ(ir::PrintType(g->FindValue("e")->type), "bool[1]");
}

}  // namespace
}  // namespace sampan::ops
