// constant_folding: all-constant nodes and shape arithmetic on static shapes
// collapse to constants.
#include "passes/pass_test_util.h"

namespace sampan::passes::testing {
namespace {

// Flatten-like reshape written the way exporters do: Shape -> Gather -> Concat -> Reshape.
const char* kShapeChain = R"(
  opset 17
  graph g (x: f32[2,3,4]) -> (y) {
    s = Shape(x) @shape
    i0 = const i64[1] {0}
    d0 = Gather(s, i0) {axis=0} @gather
    minus1 = const i64[1] {-1}
    target = Concat(d0, minus1) {axis=0} @concat
    r = Reshape(x, target) @reshape
    y = Relu(r) @relu
  }
)";

TEST(ConstantFolding, ShapeGatherConcatReshapeChain) {
  PassRun run;
  auto g = ParseAndRun(kShapeChain, {"constant_folding"}, &run);
  EXPECT_EQ(Nodes(*g), "r = Reshape(x, target) @reshape\ny = Relu(r) @relu");
  const ir::Value* target = g->FindValue("target");
  ASSERT_NE(target, nullptr);
  ASSERT_TRUE(target->is_constant());
  ASSERT_EQ(target->data.dtype(), DType::kInt64);
  ASSERT_EQ(target->data.numel(), 2);
  EXPECT_EQ(target->data.data<int64_t>()[0], 2);
  EXPECT_EQ(target->data.data<int64_t>()[1], -1);
  EXPECT_EQ(run.rewrites.size(), 3u);
  EXPECT_EQ(g->FindValue("s"), nullptr) << "intermediate shape values are dropped";
  // The reshape's output type is now fully known.
  EXPECT_EQ(ir::PrintType(g->FindValue("y")->type), "f32[2,12]");
}

TEST(ConstantFolding, ShapeChainNumerics) {
  std::string s = CheckNumerics(kShapeChain, {"constant_folding"});
  EXPECT_EQ(s.find("Shape("), std::string::npos) << s;
}

TEST(ConstantFolding, FoldsAllConstantArithmetic) {
  const char* text = R"(
    opset 17
    graph g (x: f32[3]) -> (y) {
      a = const f32[3] {1, 2, 3}
      b = const f32[3] {0.5, 0.5, 0.5}
      c = Mul(a, b) @mul
      d = Sqrt(c) @sqrt
      y = Add(x, d) @add
    }
  )";
  auto g = ParseAndRun(text, {"constant_folding"});
  EXPECT_EQ(Nodes(*g), "y = Add(x, d) @add");
  const ir::Value* d = g->FindValue("d");
  ASSERT_TRUE(d != nullptr && d->is_constant());
  EXPECT_FLOAT_EQ(d->data.data<float>()[0], std::sqrt(0.5f));
  EXPECT_FLOAT_EQ(d->data.data<float>()[2], std::sqrt(1.5f));
  CheckNumerics(text, {"constant_folding"});
}

TEST(ConstantFolding, KeepsShapeOfDynamicDimension) {
  auto g = ParseAndRun(R"(
    opset 17
    graph g (x: f32[N,4]) -> (y) {
      s = Shape(x) @shape
      i0 = const i64[1] {0}
      y = Gather(s, i0) {axis=0} @gather
    }
  )",
                       {"constant_folding"});
  EXPECT_EQ(OpList(*g), "Shape,Gather");
}

TEST(ConstantFolding, FoldsShapeOfStaticPartOfDynamicTensor) {
  // Shape with start=1 of f32[N,4,5] is [4,5]: known though N is not.
  auto g = ParseAndRun(R"(
    opset 17
    graph g (x: f32[N,4,5]) -> (y) {
      s = Shape(x) {start=1} @shape
      y = Add(s, s) @add
    }
  )",
                       {"constant_folding"});
  // Shape folds, then the Add of two constants folds; y stays a graph output.
  const ir::Value* y = g->FindValue("y");
  ASSERT_NE(y, nullptr);
  if (g->nodes().empty()) {
    ASSERT_TRUE(y->is_constant());
    EXPECT_EQ(y->data.data<int64_t>()[0], 8);
  } else {
    EXPECT_EQ(OpList(*g), "Add");
  }
}

TEST(ConstantFolding, GraphOutputComputedFromConstants) {
  // k depends only on constants and is a graph output: it must still be produced.
  const char* text = R"(
    opset 17
    graph g (x: f32[3]) -> (y, k) {
      a = const f32[3] {1, 2, 3}
      k = Add(a, a) @double
      y = Mul(x, k) @mul
    }
  )";
  auto g = ParseAndRun(text, {"constant_folding"});
  EXPECT_EQ(OutputNames(*g), (std::vector<std::string>{"y", "k"}));
  CheckNumerics(text, {"constant_folding"});
}

}  // namespace
}  // namespace sampan::passes::testing
