// RoiAlign and GridSample: symbolic shape inference, errors, identity grids and constant images.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

TEST(RoiAlignGridSampleInfer, Symbolic) {
  auto r =
      InferOneNode("RoiAlign", {TT({S("N"), K(8), S("H"), S("W")}), TT({S("R"), K(4)}), TT({S("R")}, DType::kInt64)},
                   {{"output_height", ir::Attribute::Int(7)}, {"output_width", ir::Attribute::Int(6)}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].ToString(), TT({S("R"), K(8), K(7), K(6)}).ToString());
  auto g = InferOneNode("GridSample", {TT({S("N"), K(3), S("H"), S("W")}), TT({S("N"), S("h"), K(9), K(2)})});
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ((*g)[0].ToString(), TT({S("N"), K(3), S("h"), K(9)}).ToString());
}

TEST(RoiAlignGridSampleInfer, Errors) {
  auto bad_mode = InferOneNode("RoiAlign", {TT({K(1), K(1), K(4), K(4)}), TT({K(1), K(4)}), TT({K(1)}, DType::kInt64)},
                               {{"mode", ir::Attribute::String("min")}});
  EXPECT_EQ(bad_mode.status().code(), StatusCode::kInvalidArgument);
  auto bad_grid = InferOneNode("GridSample", {TT({K(1), K(1), K(4), K(4)}), TT({K(1), K(2), K(2), K(3)})});
  EXPECT_EQ(bad_grid.status().code(), StatusCode::kInvalidArgument);
  auto bad_pad = InferOneNode("GridSample", {TT({K(1), K(1), K(4), K(4)}), TT({K(1), K(2), K(2), K(2)})},
                              {{"padding_mode", ir::Attribute::String("wrap")}});
  EXPECT_EQ(bad_pad.status().code(), StatusCode::kInvalidArgument);
  auto opset16_5d =
      InferOneNode("GridSample", {TT({K(1), K(1), K(2), K(4), K(4)}), TT({K(1), K(2), K(2), K(2), K(3)})}, {}, 16);
  EXPECT_EQ(opset16_5d.status().code(), StatusCode::kInvalidArgument);
}

TEST(RoiAlignGridSampleRun, GridSampleIdentityAndRoiAlignConstant) {
  // align_corners=1 grid hitting the pixel centres reproduces the input.
  Tensor x = Tensor::FromVector<float>(DType::kFloat32, {1, 2, 3, 4}, {1, 1, 2, 2});
  Tensor g = Tensor::FromVector<float>(DType::kFloat32, {-1, -1, 1, -1, -1, 1, 1, 1}, {1, 2, 2, 2});
  for (const char* mode : {"linear", "nearest", "cubic"}) {
    auto r = RunOneNode("GridSample", {&x, &g},
                        {{"align_corners", ir::Attribute::Int(1)}, {"mode", ir::Attribute::String(mode)}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (int i = 0; i < 4; ++i) EXPECT_NEAR((*r)[0].data<float>()[i], float(i + 1), 1e-5) << mode;
  }
  // RoiAlign over a constant image gives that constant.
  Tensor img = Tensor::FromVector<float>(DType::kFloat32, std::vector<float>(16, 2.5f), {1, 1, 4, 4});
  Tensor rois = Tensor::FromVector<float>(DType::kFloat32, {0.5f, 0.5f, 3.f, 2.5f}, {1, 4});
  Tensor bi = Tensor::FromVector<int64_t>(DType::kInt64, {0}, {1});
  auto r = RunOneNode("RoiAlign", {&img, &rois, &bi},
                      {{"output_height", ir::Attribute::Int(2)}, {"output_width", ir::Attribute::Int(2)}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (int i = 0; i < 4; ++i) EXPECT_NEAR((*r)[0].data<float>()[i], 2.5f, 1e-6);
}

}  // namespace
}  // namespace sampan::ops
