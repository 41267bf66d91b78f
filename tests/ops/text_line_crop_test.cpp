// sampan::TextLineCrop (src/ops/text_line_crop.cpp): the crop of an axis-aligned box is the plain
// resize of that part of the image, a flipped line is the crop of the image turned 180 degrees, a
// tall box is turned 90 degrees counterclockwise, the output width rules (fixed, from the widest
// line, capped), K = 0, and the errors of bad inputs. Against rapidocr's get_rotate_crop_image +
// resize_norm_img on real text: tests/models/test_ocr_ops.py.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/image_geometry.h"
#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

Result<Tensor> Crop(const Tensor& image, const Tensor& boxes, std::map<std::string, ir::Attribute> attrs = {},
                    const Tensor* flip = nullptr) {
  std::vector<ir::TensorType> types = {ir::TensorType::Static(image.dtype(), image.shape()),
                                       ir::TensorType::Static(boxes.dtype(), boxes.shape())};
  if (flip) types.push_back(ir::TensorType::Static(flip->dtype(), flip->shape()));
  auto m = MakeGraph("TextLineCrop", types, std::move(attrs), 17, 1);
  m->node->domain = "sampan";
  m->g.opsets["sampan"] = 1;
  std::vector<Tensor> outs;
  std::vector<const Tensor*> ins = {&image, &boxes};
  if (flip) ins.push_back(flip);
  SP_RETURN_IF_ERROR(RunNode(*m->node, 17, ins, &outs));
  return outs.at(0);
}

// A [h, w, c] image of varied pixels.
Tensor Picture(int64_t h, int64_t w, int64_t c) {
  Tensor t = Tensor::Alloc(DType::kUInt8, {h, w, c});
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>((i * 37 + i / 7) % 256);
  return t;
}
// One box per row of {x0, y0, x1, y1}: axis-aligned corners clockwise from the top-left.
Tensor Boxes(const std::vector<std::array<float, 4>>& r) {
  std::vector<float> v;
  for (const auto& b : r) v.insert(v.end(), {b[0], b[1], b[2], b[1], b[2], b[3], b[0], b[3]});
  return F32(v, {static_cast<int64_t>(r.size()), 4, 2});
}
// image[y0:y1, x0:x1] as its own image.
std::vector<uint8_t> Part(const Tensor& img, int64_t x0, int64_t y0, int64_t x1, int64_t y1) {
  const int64_t w = img.dim(1), c = img.dim(2);
  std::vector<uint8_t> out;
  for (int64_t y = y0; y < y1; ++y)
    out.insert(out.end(), img.data<uint8_t>() + (y * w + x0) * c, img.data<uint8_t>() + (y * w + x1) * c);
  return out;
}

TEST(TextLineCrop, AxisAlignedBoxIsAPlainResize) {
  const Tensor img = Picture(40, 100, 3);
  auto r = Crop(img, Boxes({{10, 5, 70, 29}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // 60 x 24 crop -> 48 rows, ceil(48 * 2.5) = 120 columns; Wout = int(48 * 320 / 48) = 320.
  ASSERT_EQ(r->shape(), (Shape{1, 3, 48, 320}));
  const std::vector<uint8_t> part = Part(img, 10, 5, 70, 29);
  std::vector<uint8_t> resized(48 * 120 * 3);
  ResizeBilinear(ImageView{part.data(), 24, 60, 3}, 48, 120, resized.data());
  const float* y = r->data<float>();
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t row = 0; row < 48; ++row)
      for (int64_t x = 0; x < 320; ++x) {
        const float want = x < 120 ? (resized[static_cast<size_t>((row * 120 + x) * 3 + c)] - 127.5f) / 127.5f : 0.f;
        ASSERT_EQ(y[(c * 48 + row) * 320 + x], want) << c << " " << row << " " << x;
      }
}

TEST(TextLineCrop, FlipIsTheCropOfTheImageTurned) {
  const Tensor img = Picture(40, 100, 3);
  Tensor turned = Tensor::Alloc(DType::kUInt8, {40, 100, 3});
  for (int64_t i = 0; i < 4000; ++i)
    std::copy_n(img.data<uint8_t>() + i * 3, 3, turned.mutable_data<uint8_t>() + (3999 - i) * 3);
  const Tensor flip = Tensor::FromVector<uint8_t>(DType::kBool, {1, 0}, {2});
  auto a = Crop(img, Boxes({{10, 5, 70, 29}, {10, 5, 70, 29}}), {{"width", ir::Attribute::Int(192)}}, &flip);
  auto b = Crop(turned, Boxes({{30, 11, 90, 35}}), {{"width", ir::Attribute::Int(192)}});
  auto c = Crop(img, Boxes({{10, 5, 70, 29}}), {{"width", ir::Attribute::Int(192)}});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status().ToString();
  ASSERT_EQ(a->shape(), (Shape{2, 3, 48, 192}));
  const std::vector<float> av = Values<float>(*a);
  EXPECT_EQ(std::vector<float>(av.begin(), av.begin() + 3 * 48 * 192), Values<float>(*b));
  EXPECT_EQ(std::vector<float>(av.begin() + 3 * 48 * 192, av.end()), Values<float>(*c));
}

TEST(TextLineCrop, TallBoxIsTurnedCounterclockwise) {
  // A 10 wide, 30 high box: h / w >= 1.5, so the line is 30 wide and 10 high, np.rot90's way:
  // line[y][x] = crop[x][9 - y]. Height 10 keeps it unscaled.
  const Tensor img = Picture(50, 40, 1);
  auto r = Crop(img, Boxes({{5, 8, 15, 38}}),
                {{"height", ir::Attribute::Int(10)},
                 {"width", ir::Attribute::Int(30)},
                 {"mean", ir::Attribute::Floats({0})},
                 {"std", ir::Attribute::Floats({1})}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->shape(), (Shape{1, 1, 10, 30}));
  for (int64_t y = 0; y < 10; ++y)
    for (int64_t x = 0; x < 30; ++x)
      ASSERT_EQ(r->data<float>()[y * 30 + x], img.data<uint8_t>()[(8 + x) * 40 + 5 + 9 - y]) << y << " " << x;
}

TEST(TextLineCrop, OutputWidthRules) {
  const Tensor img = Picture(60, 400, 3);
  // The widest line sets the width: 300 x 20 -> int(48 * 15) = 720; the narrow line is padded.
  auto r = Crop(img, Boxes({{0, 0, 300, 20}, {0, 30, 40, 50}}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->shape(), (Shape{2, 3, 48, 720}));
  EXPECT_EQ(r->data<float>()[(3 * 48 + 0) * 720 + 96], 0.f);  // line 1 ends at ceil(48 * 2) = 96
  // Capped by max_width; the wide line is squeezed into it.
  auto capped = Crop(img, Boxes({{0, 0, 300, 20}}), {{"max_width", ir::Attribute::Int(500)}});
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->shape(), (Shape{1, 3, 48, 500}));
  // No boxes: [0, C, height, min_width].
  auto none = Crop(img, F32({}, {0, 4, 2}));
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->shape(), (Shape{0, 3, 48, 320}));
  // min_width itself, where height * (min_width / height) would round one below (7, 61: 60.99..),
  // as shape inference says: no boxes, and a box narrower than min_width.
  const std::map<std::string, ir::Attribute> odd = {{"height", ir::Attribute::Int(7)},
                                                    {"min_width", ir::Attribute::Int(61)}};
  auto none7 = Crop(img, F32({}, {0, 4, 2}), odd);
  ASSERT_TRUE(none7.ok()) << none7.status().ToString();
  EXPECT_EQ(none7->shape(), (Shape{0, 3, 7, 61}));
  auto narrow7 = Crop(img, Boxes({{0, 0, 20, 20}}), odd);
  ASSERT_TRUE(narrow7.ok()) << narrow7.status().ToString();
  EXPECT_EQ(narrow7->shape(), (Shape{1, 3, 7, 61}));
}

TEST(TextLineCrop, BadInputsAreErrors) {
  const Tensor img = Picture(40, 100, 3);
  auto err = [](const Result<Tensor>& r, const std::string& what) {
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().ToString();
  };
  err(Crop(img, F32(std::vector<float>(12, 1.f), {2, 2, 3})), "boxes must be [K, 4, 2]");
  err(Crop(Picture(40, 100, 3), Boxes({{1, 1, NAN, 9}})), "non-finite");
  err(Crop(img, Boxes({{5, 5, 5, 5}})), "empty crop");
  err(Crop(img, Boxes({{0, 0, 1e6f, 20}})), "over the limit");
  err(Crop(img, Boxes({{0, 0, 9000, 9000}})), "over the limit");
  const Tensor flat = Tensor::Alloc(DType::kUInt8, {40, 100});
  err(Crop(flat, Boxes({{1, 1, 9, 9}})), "rank 2");
  const Tensor flip = Tensor::FromVector<uint8_t>(DType::kBool, {1, 0}, {2});
  err(Crop(img, Boxes({{1, 1, 9, 9}}), {}, &flip), "flip");
  err(Crop(img, Boxes({{1, 1, 9, 9}}), {{"mean", ir::Attribute::Floats({1, 2})}}), "mean has 2 values");
  err(Crop(img, Boxes({{1, 1, 9, 9}}), {{"height", ir::Attribute::Int(0)}}), "height must be");
  // Three corners on a line still map (onto a line, as cv2 samples it): no error, no crash.
  EXPECT_TRUE(Crop(img, F32({0, 0, 10, 0, 20, 0, 0, 10}, {1, 4, 2})).ok());
}

}  // namespace
}  // namespace sampan::ops
