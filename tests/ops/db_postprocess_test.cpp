// sampan::DbPostProcess (src/ops/db_postprocess.cpp): boxes of synthetic probability maps worked
// out directly (an axis-aligned and a rotated rectangle: the rectangle grown by the unclip
// distance, clockwise from the top-left, clipped), PaddleOCR's reading order with its same-line
// tolerance, the thresholds, size limits, scaling to src_size, batches, empty maps, and the errors
// of bad inputs. Against rapidocr's DBPostProcess on real det maps: tests/models/test_ocr_ops.py.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

Result<std::vector<Tensor>> Post(const Tensor& prob, std::map<std::string, ir::Attribute> attrs = {},
                                 const Tensor* src_size = nullptr) {
  std::vector<ir::TensorType> types = {ir::TensorType::Static(prob.dtype(), prob.shape())};
  if (src_size) types.push_back(ir::TensorType::Static(src_size->dtype(), src_size->shape()));
  auto m = MakeGraph("DbPostProcess", types, std::move(attrs), 17, 3);
  m->node->domain = "sampan";
  m->g.opsets["sampan"] = 1;
  std::vector<Tensor> outs;
  SP_RETURN_IF_ERROR(RunNode(*m->node, 17, {&prob, src_size}, &outs));
  return outs;
}

// A [n, 1, h, w] map, 0 everywhere.
Tensor Map(int64_t n, int64_t h, int64_t w) {
  Tensor t = Tensor::Alloc(DType::kFloat32, {n, 1, h, w});
  std::fill_n(t.mutable_data<float>(), t.numel(), 0.f);
  return t;
}
// Sets pixels [x0, x1) x [y0, y1) of image b to v.
void Fill(Tensor& t, int64_t b, int64_t x0, int64_t y0, int64_t x1, int64_t y1, float v = 0.9f) {
  const int64_t h = t.dim(2), w = t.dim(3);
  for (int64_t y = y0; y < y1; ++y)
    for (int64_t x = x0; x < x1; ++x) t.mutable_data<float>()[(b * h + y) * w + x] = v;
}
std::vector<float> Box(const Tensor& boxes, int64_t k) {
  return std::vector<float>(boxes.data<float>() + k * 8, boxes.data<float>() + k * 8 + 8);
}

TEST(DbPostProcess, AxisAlignedRectangleGrowsByTheUnclipDistance) {
  Tensor prob = Map(1, 100, 200);
  Fill(prob, 0, 20, 40, 80, 60);  // 60 x 20 pixels
  auto r = Post(prob);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Tensor& boxes = (*r)[0];
  ASSERT_EQ(boxes.shape(), (Shape{1, 4, 2}));
  // Dilated (one pixel right and down), the border runs x 20..80, y 40..60: a 60 x 20 rectangle.
  // d = area * 1.6 / perimeter = 1200 * 1.6 / 160 = 12.
  EXPECT_EQ(Box(boxes, 0), (std::vector<float>{8, 28, 92, 28, 92, 72, 8, 72}));
  // Its score: the 1200 pixels of 0.9 among the rectangle's 61 x 21.
  EXPECT_NEAR((*r)[1].data<float>()[0], 0.9 * 1200 / 1281, 1e-6);
  EXPECT_EQ((*r)[2].data<int64_t>()[0], 0);
  // unclip_ratio 0.8 grows by 6; without dilation the border is x 20..79, y 40..59.
  auto half = Post(prob, {{"unclip_ratio", ir::Attribute::Float(0.8f)}, {"use_dilation", ir::Attribute::Int(0)}});
  ASSERT_TRUE(half.ok());
  const double d = 59.0 * 19 * 0.8 / (2 * (59 + 19));
  const float x0 = std::round(20 - d), x1 = std::round(79 + d), y0 = std::round(40 - d), y1 = std::round(59 + d);
  EXPECT_EQ(Box((*half)[0], 0), (std::vector<float>{x0, y0, x1, y0, x1, y1, x0, y1}));
}

TEST(DbPostProcess, RotatedRectangleAndClipping) {
  Tensor prob = Map(1, 120, 200);
  // A 60 x 16 rectangle turned 30 degrees about (120, 60), and one touching the top-left corner.
  const double c = std::cos(M_PI / 6), s = std::sin(M_PI / 6);
  for (int64_t y = 0; y < 120; ++y)
    for (int64_t x = 0; x < 200; ++x) {
      const double u = (x - 120) * c + (y - 60) * s, v = -(x - 120) * s + (y - 60) * c;
      if (std::fabs(u) <= 30 && std::fabs(v) <= 8) prob.mutable_data<float>()[y * 200 + x] = 0.8f;
    }
  Fill(prob, 0, 0, 0, 30, 10);
  auto r = Post(prob);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Tensor& boxes = (*r)[0];
  ASSERT_EQ(boxes.shape(), (Shape{2, 4, 2}));
  // The corner box first (top to bottom), grown past the image and clipped to it.
  const std::vector<float> corner = Box(boxes, 0);
  EXPECT_EQ(corner[0], 0.f);
  EXPECT_EQ(corner[1], 0.f);
  // The rotated one: the rectangle (about 61 x 17 once dilated) grown by d = A * 1.6 / P on every
  // side; corners clockwise from the top-left, within 2 px.
  const double w = 61 + 2 * (61 * 17 * 1.6 / (2 * (61 + 17))), h = 17 + 2 * (61 * 17 * 1.6 / (2 * (61 + 17)));
  const double cx = 120.5, cy = 60.5;
  auto corner_at = [&](double a, double b) {
    return std::pair<double, double>{cx + a * c - b * s, cy + a * s + b * c};
  };
  const std::pair<double, double> want[4] = {corner_at(-w / 2, h / 2), corner_at(-w / 2, -h / 2),
                                             corner_at(w / 2, -h / 2), corner_at(w / 2, h / 2)};
  // Clockwise from the top-left, as rapidocr orders them: the two leftmost split by y.
  const std::vector<float> got = Box(boxes, 1);
  const int order[4] = {1, 2, 3, 0};  // top-left is the (-w/2, -h/2) corner's neighbour by x order
  for (int k = 0; k < 4; ++k) {
    EXPECT_NEAR(got[2 * k], want[order[k]].first, 2.0) << k;
    EXPECT_NEAR(got[2 * k + 1], want[order[k]].second, 2.0) << k;
  }
  // Its score: 0.8 inside, the dilated rim and the rectangle's slack around the turned pixels 0.
  EXPECT_GT((*r)[1].data<float>()[1], 0.6f);
  EXPECT_LT((*r)[1].data<float>()[1], 0.8f);
}

TEST(DbPostProcess, ReadingOrderWithTheSameLineTolerance) {
  Tensor prob = Map(1, 100, 200);
  Fill(prob, 0, 100, 20, 140, 30);  // A: top 20, right
  Fill(prob, 0, 10, 26, 50, 36);    // B: top 26 (< 10 px lower), left: read before A
  Fill(prob, 0, 60, 60, 100, 70);   // C: a line below
  auto r = Post(prob);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{3, 4, 2}));
  EXPECT_LT(Box((*r)[0], 0)[0], 20.f);  // B
  EXPECT_GT(Box((*r)[0], 1)[0], 80.f);  // A
  EXPECT_GT(Box((*r)[0], 2)[1], 40.f);  // C
  // sort 0 keeps the contour order: the last found (lowest) first, as cv2 lists them.
  auto raw = Post(prob, {{"sort", ir::Attribute::Int(0)}});
  ASSERT_TRUE(raw.ok());
  EXPECT_GT(Box((*raw)[0], 0)[1], 40.f);
}

TEST(DbPostProcess, ThresholdsSizesAndScaling) {
  Tensor prob = Map(1, 100, 200);
  Fill(prob, 0, 20, 40, 80, 60);
  Fill(prob, 0, 150, 80, 152, 82);  // 2 x 2: below min_size even dilated (3 x 3 border: 2 < 3)
  auto r = Post(prob);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].dim(0), 1);
  EXPECT_EQ(Post(prob, {{"box_thresh", ir::Attribute::Float(0.9f)}})->at(0).dim(0), 0);  // score 0.84
  EXPECT_EQ(Post(prob, {{"thresh", ir::Attribute::Float(0.95f)}})->at(0).dim(0), 0);
  EXPECT_EQ(Post(prob, {{"min_size", ir::Attribute::Int(21)}})->at(0).dim(0), 0);  // shorter side 20
  EXPECT_EQ(Post(prob, {{"max_candidates", ir::Attribute::Int(0)}})->at(0).dim(0), 0);
  // src_size twice the map: coordinates doubled (8..92 x 28..72 -> 16..184 x 56..144).
  const Tensor src = Tensor::FromVector<int64_t>(DType::kInt64, {200, 400}, {2});
  auto big = Post(prob, {}, &src);
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_EQ(Box((*big)[0], 0), (std::vector<float>{16, 56, 184, 56, 184, 144, 16, 144}));
  // Slow scores average the contour's inside: the rectangle itself, all 0.9 but its dilated rim.
  auto slow = Post(prob, {{"score_mode", ir::Attribute::String("slow")}});
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  EXPECT_EQ(Box((*slow)[0], 0), Box((*r)[0], 0));
  // Empty map: no boxes, with their shapes.
  auto none = Post(Map(1, 32, 32));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)[0].shape(), (Shape{0, 4, 2}));
  EXPECT_EQ((*none)[1].shape(), (Shape{0}));
  EXPECT_EQ((*none)[2].shape(), (Shape{0}));
}

TEST(DbPostProcess, BatchesFloat16AndRank3) {
  Tensor prob = Map(2, 64, 64);
  Fill(prob, 1, 10, 10, 50, 30);
  auto h = CastTensor(prob, DType::kFloat16);
  ASSERT_TRUE(h.ok());
  auto r = Post(*h);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].dim(0), 1);
  EXPECT_EQ((*r)[2].data<int64_t>()[0], 1);
  auto r3 = Post(Tensor::FromVector<float>(DType::kFloat32, Values<float>(prob), {2, 64, 64}));
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(Values<float>((*r3)[0]), Values<float>((*r)[0]));
}

TEST(DbPostProcess, BadInputsAreErrors) {
  auto err = [](const Result<std::vector<Tensor>>& r, const std::string& what) {
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().ToString();
  };
  err(Post(Tensor::Alloc(DType::kInt32, {1, 1, 8, 8})), "float32 or float16");
  err(Post(Map(1, 8, 8).Reshaped({64})), "rank 1");
  err(Post(Tensor::Alloc(DType::kFloat32, {1, 2, 8, 8})), "1 channel");
  err(Post(Map(1, 8, 8), {{"score_mode", ir::Attribute::String("mean")}}), "score_mode");
  err(Post(Map(1, 8, 8), {{"thresh", ir::Attribute::Float(NAN)}}), "thresh");
  const Tensor three = Tensor::FromVector<int64_t>(DType::kInt64, {1, 2, 3}, {3});
  err(Post(Map(1, 8, 8), {}, &three), "src_size");
  const Tensor negative = Tensor::FromVector<int64_t>(DType::kInt64, {-5, 10}, {2});
  err(Post(Map(1, 8, 8), {}, &negative), "src_size (-5, 10)");
}

}  // namespace
}  // namespace sampan::ops
