// Einsum: symbolic shape inference, the errors, and diagonal/trace/ellipsis numerics that
// the ONNX conformance cases do not cover.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

TEST(EinsumInfer, SymbolicBatchMatmul) {
  auto t = InferFirst("Einsum", {TT({S("B"), K(2), K(3)}), TT({S("B"), K(3), K(5)})},
                      {{"equation", ir::Attribute::String("bij,bjk->bik")}}, 12);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ToString(), "f32[B,2,5]");
  // Implicit output with ellipsis: ellipsis dims first, then single-use letters sorted.
  auto e = InferFirst("Einsum", {TT({S("N"), K(4), K(3)}), TT({K(3), K(7)})},
                      {{"equation", ir::Attribute::String("...ij,jk")}}, 12);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->ToString(), "f32[N,4,7]");
}

TEST(EinsumInfer, Errors) {
  auto missing = InferFirst("Einsum", {TT({K(2), K(2)})}, {}, 12);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  auto rank = InferFirst("Einsum", {TT({K(2), K(2)})}, {{"equation", ir::Attribute::String("ijk->i")}}, 12);
  ASSERT_FALSE(rank.ok());
  EXPECT_EQ(rank.status().code(), StatusCode::kInvalidArgument);
  auto mismatch = InferFirst("Einsum", {TT({K(2), K(3)}), TT({K(4), K(5)})},
                             {{"equation", ir::Attribute::String("ij,jk->ik")}}, 12);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  auto bad_out = InferFirst("Einsum", {TT({K(2), K(3)})}, {{"equation", ir::Attribute::String("ij->z")}}, 12);
  ASSERT_FALSE(bad_out.ok());
  EXPECT_EQ(bad_out.status().code(), StatusCode::kInvalidArgument);
}

TEST(EinsumRun, DiagonalTraceAndBroadcast) {
  Tensor a = F32({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  auto diag = RunFirst("Einsum", {a}, {{"equation", ir::Attribute::String("ii->i")}}, 12);
  ASSERT_TRUE(diag.ok()) << diag.status().ToString();
  EXPECT_EQ(Values<float>(*diag), (std::vector<float>{1, 5, 9}));
  auto trace = RunFirst("Einsum", {a}, {{"equation", ir::Attribute::String("ii")}}, 12);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->rank(), 0);
  EXPECT_EQ(Values<float>(*trace), (std::vector<float>{15}));
  // Ellipsis broadcasting: [2,1,2] x [3,2] -> [2,3] sums over k.
  Tensor x = F32({1, 2, 3, 4}, {2, 1, 2});
  Tensor y = F32({1, 1, 2, 2, 3, 3}, {3, 2});
  auto b = RunFirst("Einsum", {x, y}, {{"equation", ir::Attribute::String("...k,...k->...")}}, 12);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->shape(), (Shape{2, 3}));
  EXPECT_EQ(Values<float>(*b), (std::vector<float>{3, 6, 9, 7, 14, 21}));
  Tensor i1 = Tensor::FromVector(DType::kInt32, std::vector<int32_t>{1, 2, 3}, {3});
  auto dot = RunFirst("Einsum", {i1, i1}, {{"equation", ir::Attribute::String("i,i->")}}, 12);
  ASSERT_TRUE(dot.ok()) << dot.status().ToString();
  EXPECT_EQ(Values<int32_t>(*dot), (std::vector<int32_t>{14}));
}

}  // namespace
}  // namespace sampan::ops
