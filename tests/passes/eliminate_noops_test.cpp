// eliminate_noops: Identity, inference Dropout, Cast to the same type, Reshape to
// the same static shape and identity Transpose disappear; graph output names stay.
#include "passes/pass_test_util.h"

namespace sampan::passes::testing {
namespace {

const char* kMiddle = R"(
  opset 17
  graph g (x: f32[2,3,4]) -> (y) {
    a = Identity(x) @id
    ratio = const f32[] {0.5}
    training = const bool[] {false}
    b = Dropout(a, ratio, training) @drop
    c = Cast(b) {to=1} @cast
    d = Relu(c) @relu
    shp = const i64[3] {2, 3, 4}
    e = Reshape(d, shp) @reshape
    f = Transpose(e) {perm=[0, 1, 2]} @transpose
    y = Sigmoid(f) @sig
  }
)";

TEST(EliminateNoops, RemovesNoopsInTheMiddle) {
  PassRun run;
  auto g = ParseAndRun(kMiddle, {"eliminate_noops"}, &run);
  EXPECT_EQ(Nodes(*g), "d = Relu(x) @relu\ny = Sigmoid(d) @sig");
  EXPECT_EQ(run.rewrites.size(), 5u);
  for (const auto& r : run.rewrites) EXPECT_EQ(r.pass, "eliminate_noops");
}

TEST(EliminateNoops, MiddleNumerics) {
  CheckNumerics(kMiddle, {"eliminate_noops"});
}

const char* kOutputs = R"(
  opset 17
  graph g (x: f32[2,3]) -> (y, z) {
    a = Relu(x) @relu
    y = Identity(a) @id
    b = Neg(x) @neg
    z = Dropout(b) @drop
  }
)";

TEST(EliminateNoops, RemovedNodeOutputIsGraphOutput) {
  auto g = ParseAndRun(kOutputs, {"eliminate_noops"});
  EXPECT_EQ(Nodes(*g), "y = Relu(x) @relu\nz = Neg(x) @neg");
  EXPECT_EQ(OutputNames(*g), (std::vector<std::string>{"y", "z"}));
  // The renamed producer output keeps the type of the graph output.
  ASSERT_NE(g->FindValue("y"), nullptr);
  EXPECT_EQ(g->FindValue("y")->producer()->op_type, "Relu");
}

TEST(EliminateNoops, OutputsNumerics) {
  CheckNumerics(kOutputs, {"eliminate_noops"});
}

TEST(EliminateNoops, CastOutputAsGraphOutputKeepsName) {
  auto g = ParseAndRun(R"(
    opset 17
    graph g (x: f32[3]) -> (out) {
      a = Abs(x) @abs
      out = Cast(a) {to=1} @cast
    }
  )",
                       {"eliminate_noops"});
  EXPECT_EQ(Nodes(*g), "out = Abs(x) @abs");
  EXPECT_EQ(OutputNames(*g), std::vector<std::string>{"out"});
}

TEST(EliminateNoops, KeepsIdentityFromInputToOutput) {
  // y = Identity(x) with x a graph input: removing it would rename an input or
  // output, so it stays.
  auto g = ParseAndRun(R"(
    opset 17
    graph g (x: f32[3]) -> (y) {
      y = Identity(x) @id
    }
  )",
                       {"eliminate_noops"});
  EXPECT_EQ(Nodes(*g), "y = Identity(x) @id");
  EXPECT_EQ(OutputNames(*g), std::vector<std::string>{"y"});
}

TEST(EliminateNoops, KeepsIdentityBetweenTwoOutputs) {
  // a and y are both graph outputs: y's Identity cannot be removed.
  auto g = ParseAndRun(R"(
    opset 17
    graph g (x: f32[3]) -> (a, y) {
      a = Relu(x) @relu
      y = Identity(a) @id
    }
  )",
                       {"eliminate_noops"});
  EXPECT_EQ(Nodes(*g), "a = Relu(x) @relu\ny = Identity(a) @id");
  EXPECT_EQ(OutputNames(*g), (std::vector<std::string>{"a", "y"}));
}

TEST(EliminateNoops, KeepsRealWork) {
  const char* text = R"(
    opset 17
    graph g (x: f32[2,3]) -> (y) {
      c = Cast(x) {to=11} @to_double
      d = Cast(c) {to=1} @back
      shp = const i64[2] {3, 2}
      r = Reshape(d, shp) @reshape
      y = Transpose(r) {perm=[1, 0]} @transpose
    }
  )";
  auto g = ParseAndRun(text, {"eliminate_noops"});
  EXPECT_EQ(OpList(*g), "Cast,Cast,Reshape,Transpose");
}

TEST(EliminateNoops, KeepsDropoutWithUsedMask) {
  auto g = ParseAndRun(R"(
    opset 17
    graph g (x: f32[4]) -> (y, m) {
      y, m = Dropout(x) @drop
    }
  )",
                       {"eliminate_noops"});
  EXPECT_EQ(OpList(*g), "Dropout");
}

TEST(EliminateNoops, KeepsDropoutWithNonConstantTrainingMode) {
  auto g = ParseAndRun(R"(
    opset 17
    graph g (x: f32[4], training: bool[]) -> (y) {
      ratio = const f32[] {0.5}
      y = Dropout(x, ratio, training) @drop
    }
  )",
                       {"eliminate_noops"});
  EXPECT_EQ(OpList(*g), "Dropout");
}

TEST(EliminateNoops, KeepsDropoutWhoseMaskIsAGraphOutput) {
  // The mask has no reader but is a graph output: removing the Dropout would
  // leave that output without a producer.
  const char* text = R"(
    opset 17
    graph g (x: f32[4]) -> (y, m) {
      a = Relu(x) @relu
      y, m = Dropout(a) @drop
    }
  )";
  auto g = ParseAndRun(text, {"eliminate_noops"});
  EXPECT_EQ(OpList(*g), "Relu,Dropout");
  CheckNumerics(text, {"eliminate_noops"});
}

}  // namespace
}  // namespace sampan::passes::testing
