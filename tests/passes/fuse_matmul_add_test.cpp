// fuse_matmul_add: MatMul(A, W) + bias -> Gemm (2-D A) or sampan::FusedMatMul (N-D A).
#include "passes/pass_test_util.h"

namespace sampan::passes::testing {
namespace {

const char* kMatMul3d = R"(
  opset 17
  graph g (x: f32[2,3,5]) -> (y) {
    w = const f32[5,4] random
    bias = const f32[4] random
    m = MatMul(x, w) @mm
    y = Add(m, bias) @add
  }
)";

TEST(FuseMatMulAdd, ThreeDIntoFusedMatMul) {
  PassRun run;
  auto g = ParseAndRun(kMatMul3d, {"fuse_matmul_add"}, &run);
  EXPECT_EQ(Nodes(*g), "y = sampan::FusedMatMul(x, w, bias_1d) @mm");
  EXPECT_EQ(g->opsets.count("sampan"), 1u) << "the sampan domain is declared";
  EXPECT_EQ(ir::PrintType(g->FindValue("y")->type), "f32[2,3,4]");
  ASSERT_EQ(run.rewrites.size(), 1u);
  EXPECT_NE(run.rewrites[0].description.find("FusedMatMul"), std::string::npos);
}

TEST(FuseMatMulAdd, ThreeDNumerics) {
  CheckNumerics(kMatMul3d, {"fuse_matmul_add"});
}

const char* kMatMul2d = R"(
  opset 17
  graph g (x: f32[3,5]) -> (y) {
    w = const f32[5,4] random
    bias = const f32[1,4] random
    m = MatMul(x, w) @mm
    y = Add(bias, m) @add
  }
)";

TEST(FuseMatMulAdd, TwoDIntoGemm) {
  auto g = ParseAndRun(kMatMul2d, {"fuse_matmul_add"});
  EXPECT_EQ(Nodes(*g), "y = Gemm(x, w, bias_1d) @mm");
  EXPECT_EQ(g->opsets.count("sampan"), 0u);
  EXPECT_EQ(ir::PrintType(g->FindValue("bias_1d")->type), "f32[4]");
}

TEST(FuseMatMulAdd, TwoDNumerics) {
  CheckNumerics(kMatMul2d, {"fuse_matmul_add"});
}

TEST(FuseMatMulAdd, NotWhenBiasBroadcastsOverRows) {
  // bias [3,1] is per row, not per output column.
  const char* text = R"(
    opset 17
    graph g (x: f32[3,4]) -> (y) {
      w = const f32[4,3] random
      bias = const f32[3,1] random
      m = MatMul(x, w) @mm
      y = Add(m, bias) @add
    }
  )";
  auto g = ParseAndRun(text, {"fuse_matmul_add"});
  EXPECT_EQ(OpList(*g), "MatMul,Add");
}

TEST(FuseMatMulAdd, NotWhenWeightIsNotConstant) {
  auto g = ParseAndRun(R"(
    opset 17
    graph g (x: f32[3,4], w: f32[4,2]) -> (y) {
      bias = const f32[2] random
      m = MatMul(x, w) @mm
      y = Add(m, bias) @add
    }
  )",
                       {"fuse_matmul_add"});
  EXPECT_EQ(OpList(*g), "MatMul,Add");
}

TEST(FuseMatMulAdd, NotWhenProductIsGraphOutput) {
  auto g = ParseAndRun(R"(
    opset 17
    graph g (x: f32[3,4]) -> (m, y) {
      w = const f32[4,2] random
      bias = const f32[2] random
      m = MatMul(x, w) @mm
      y = Add(m, bias) @add
    }
  )",
                       {"fuse_matmul_add"});
  EXPECT_EQ(OpList(*g), "MatMul,Add");
}

}  // namespace
}  // namespace sampan::passes::testing
