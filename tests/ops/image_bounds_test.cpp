// sampan::ImageWithinBounds (src/ops/image_bounds.cpp): rapidocr's resize_image_within_bounds
// sizes (int, then Python's round to a multiple of 32), the ratio back to the image, images left
// as they are, the resampling (cv2's bilinear, as ResizeImage), and the errors of bad inputs.
// Against rapidocr on a large rendered label: tests/server/test_pipelines.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "ops/image_geometry.h"
#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

Result<std::vector<Tensor>> Bound(const Tensor& image, std::map<std::string, ir::Attribute> attrs = {}) {
  auto m =
      MakeGraph("ImageWithinBounds", {ir::TensorType::Static(image.dtype(), image.shape())}, std::move(attrs), 17, 2);
  m->node->domain = "sampan";
  m->g.opsets["sampan"] = 1;
  std::vector<Tensor> outs;
  SP_RETURN_IF_ERROR(RunNode(*m->node, 17, {&image}, &outs));
  return outs;
}

Tensor Ramp(Shape s) {
  Tensor t = Tensor::Alloc(DType::kUInt8, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(i * 7 % 251);
  return t;
}

TEST(ImageWithinBounds, ShrinksTheLongSideAsRapidocr) {
  // 3000 x 4000: ratio 2000 / 4000 = 0.5 -> 1500 x 2000 -> round(46.875) * 32 = 1504, 2000 -> 62.5 -> 62 * 32 = 1984.
  auto r = Bound(Ramp({3000, 4000, 3}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].shape(), (Shape{1504, 1984, 3}));
  EXPECT_FLOAT_EQ((*r)[1].data<float>()[0], 3000.f / 1504.f);
  EXPECT_FLOAT_EQ((*r)[1].data<float>()[1], 4000.f / 1984.f);
  // The pixels are cv2's bilinear resize of the image.
  const Tensor src = Ramp({3000, 4000, 3});
  std::vector<uint8_t> want(1504 * 1984 * 3);
  ResizeBilinear(ImageView{src.data<uint8_t>(), 3000, 4000, 3}, 1504, 1984, want.data());
  EXPECT_EQ(std::memcmp((*r)[0].data<uint8_t>(), want.data(), want.size()), 0);
}

TEST(ImageWithinBounds, LeavesImagesWithinTheBoundsAndGrowsTinyOnes) {
  const Tensor img = Ramp({300, 680, 3});
  auto same = Bound(img);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ((*same)[0].shape(), img.shape());
  EXPECT_EQ(std::memcmp((*same)[0].data<uint8_t>(), img.data<uint8_t>(), static_cast<size_t>(img.numel())), 0);
  EXPECT_EQ((*same)[1].data<float>()[0], 1.f);
  EXPECT_EQ((*same)[1].data<float>()[1], 1.f);
  // 20 x 100 (under 30): ratio 1.5 -> 30 x 150 -> 32 x 160; ratio back 20 / 32, 100 / 160.
  auto grown = Bound(Ramp({20, 100, 1}));
  ASSERT_TRUE(grown.ok()) << grown.status().ToString();
  EXPECT_EQ((*grown)[0].shape(), (Shape{32, 160, 1}));
  EXPECT_FLOAT_EQ((*grown)[1].data<float>()[0], 20.f / 32.f);
  EXPECT_FLOAT_EQ((*grown)[1].data<float>()[1], 100.f / 160.f);
}

TEST(ImageWithinBounds, BadInputsAreErrors) {
  auto err = [](const Result<std::vector<Tensor>>& r, const char* what) {
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr(what));
  };
  err(Bound(Ramp({4, 4})), "rank 2");
  err(Bound(Ramp({4, 4, 5})), "5 channels");
  err(Bound(Ramp({0, 4, 3})), "is empty");
  err(Bound(Ramp({40, 40, 3}), {{"max_side_len", ir::Attribute::Int(8)}}), "max_side_len must be");
  err(Bound(Ramp({40, 40, 3}), {{"min_side_len", ir::Attribute::Int(5000)}}), "min_side_len must be");
  // 3 x 9000 with max_side_len 2000: 0.666.. -> int 0 -> 0: a side of 0.
  err(Bound(Ramp({3, 9000, 1})), "scales to 0 x");
}

}  // namespace
}  // namespace sampan::ops
