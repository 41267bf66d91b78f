// sampan::ResizeImage (src/ops/resize_image.cpp): cv2's bilinear values worked by hand (stretch),
// rapidocr's limit_side sizes with Python's half-to-even rounding, the ultralytics letterbox's
// padding and transform, channel swap, batches, and the errors of bad inputs. Against rapidocr and
// cv2 on real images: tests/models/test_ocr_ops.py.
#include <gtest/gtest.h>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)

std::unique_ptr<OneNode> Node(const ir::TensorType& image, std::map<std::string, ir::Attribute> attrs) {
  auto m = MakeGraph("ResizeImage", {image}, std::move(attrs), 17, 2);
  m->node->domain = "sampan";
  m->g.opsets["sampan"] = 1;
  return m;
}

Result<std::vector<Tensor>> Resize(const Tensor& image, std::map<std::string, ir::Attribute> attrs) {
  auto m = Node(ir::TensorType::Static(image.dtype(), image.shape()), std::move(attrs));
  std::vector<Tensor> outs;
  SP_RETURN_IF_ERROR(RunNode(*m->node, 17, {&image}, &outs));
  return outs;
}

// The inferred type of the tensor output, as text.
std::string Inferred(const ir::TensorType& image, std::map<std::string, ir::Attribute> attrs = {}) {
  auto m = Node(image, std::move(attrs));
  if (Status st = InferTypes(m->g); !st.ok()) return st.ToString();
  return m->g.FindValue("out0")->type.ToString() + " " + m->g.FindValue("out1")->type.ToString();
}

Tensor U8(std::vector<uint8_t> v, Shape s) {
  return Tensor::FromVector(DType::kUInt8, v, std::move(s));
}
Tensor Ramp(Shape s) {
  Tensor t = Tensor::Alloc(DType::kUInt8, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(i * 7 % 251);
  return t;
}
const ir::Attribute kRaw = ir::Attribute::Floats({0.f});   // mean 0
const ir::Attribute kUnit = ir::Attribute::Floats({1.f});  // scale 1

TEST(ResizeImage, StretchIsCv2Bilinear) {
  // 1x2 -> 1x4: half-pixel centres at -0.25, 0.25, 0.75, 1.25 of [0, 255]; 63.75 and 191.25
  // come out as cv2's fixed point rounds them.
  auto r = Resize(U8({0, 255}, {1, 2, 1}), {{"mode", ir::Attribute::String("stretch")},
                                            {"size", ir::Attribute::Ints({1, 4})},
                                            {"mean", kRaw},
                                            {"std", kUnit}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].shape(), (Shape{1, 1, 1, 4}));
  EXPECT_EQ(Values<float>((*r)[0]), (std::vector<float>{0, 64, 191, 255}));
  EXPECT_EQ(Values<float>((*r)[1]), (std::vector<float>{1, 2, 0, 0}));
  // Default normalisation: (px - 127.5) / 127.5.
  auto n = Resize(U8({0, 255}, {1, 2, 1}),
                  {{"mode", ir::Attribute::String("stretch")}, {"size", ir::Attribute::Ints({1, 2})}});
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(Values<float>((*n)[0]), (std::vector<float>{-1, 1}));
}

TEST(ResizeImage, LimitSideRoundsAsRapidocr) {
  // min side 50 < 736: ratio 14.72 -> 1472 x 736.
  auto r = Resize(Ramp({100, 50, 3}), {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].shape(), (Shape{1, 3, 1472, 736}));
  EXPECT_FLOAT_EQ((*r)[1].data<float>()[0], 14.72f);
  // limit_type max, the longer side 48 is within 48: ratio 1; 48 / 32 = 1.5 rounds to 2 (64),
  // 24 / 32 = 0.75 to 1 (32): Python's round.
  auto m = Resize(Ramp({48, 24, 3}),
                  {{"limit_type", ir::Attribute::String("max")}, {"limit_side_len", ir::Attribute::Int(48)}});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)[0].shape(), (Shape{1, 3, 64, 32}));
  EXPECT_EQ(Values<float>((*m)[1]), (std::vector<float>{64.f / 48, 32.f / 24, 0, 0}));
  // 80 / 32 = 2.5 rounds to 2 (half to even).
  auto e = Resize(Ramp({80, 80, 1}),
                  {{"limit_type", ir::Attribute::String("max")}, {"limit_side_len", ir::Attribute::Int(100)}});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)[0].shape(), (Shape{1, 1, 64, 64}));
  // Inference knows the size when the image's is static, not otherwise.
  EXPECT_EQ(Inferred(TT({K(100), K(50), K(3)}, DType::kUInt8)), "f32[1,3,1472,736] f32[4]");
  EXPECT_EQ(Inferred(TT({S("n"), ir::Dim::Unknown(), ir::Dim::Unknown(), K(3)}, DType::kUInt8)), "f32[n,3,?,?] f32[4]");
  EXPECT_EQ(Inferred(TT({ir::Dim::Unknown(), ir::Dim::Unknown(), K(3)}, DType::kUInt8),
                     {{"mode", ir::Attribute::String("letterbox")}, {"size", ir::Attribute::Ints({640, 480})}}),
            "f32[1,3,640,480] f32[4]");
}

TEST(ResizeImage, LetterboxPadsCentredWith114) {
  // 11 x 20 into 20 x 20: r = 1, 9 rows of padding: 4 above (round(4.4)), 5 below.
  Tensor img = Ramp({11, 20, 3});
  auto r = Resize(img, {{"mode", ir::Attribute::String("letterbox")},
                        {"size", ir::Attribute::Ints({20, 20})},
                        {"mean", kRaw},
                        {"std", kUnit},
                        {"swap_rb", ir::Attribute::Int(1)}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Tensor& y = (*r)[0];
  ASSERT_EQ(y.shape(), (Shape{1, 3, 20, 20}));
  EXPECT_EQ(Values<float>((*r)[1]), (std::vector<float>{1, 1, 4, 0}));
  const float* p = y.data<float>();
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t row = 0; row < 20; ++row)
      for (int64_t x = 0; x < 20; ++x) {
        const float v = p[(c * 20 + row) * 20 + x];
        if (row < 4 || row >= 15) {
          ASSERT_EQ(v, 114.f) << c << " " << row << " " << x;
        } else {  // channels swapped: output c is input 2 - c
          ASSERT_EQ(v, img.data<uint8_t>()[((row - 4) * 20 + x) * 3 + (2 - c)]) << c << " " << row << " " << x;
        }
      }
  // 10 x 40 into 20 x 20: r = 0.5 -> 5 x 20, 7 rows (round(7.4)) above; transform maps back.
  auto s = Resize(Ramp({10, 40, 3}),
                  {{"mode", ir::Attribute::String("letterbox")}, {"size", ir::Attribute::Ints({20, 20})}});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(Values<float>((*s)[1]), (std::vector<float>{0.5f, 0.5f, 7, 0}));
}

TEST(ResizeImage, BatchesOfEqualImages) {
  Tensor batch = Ramp({2, 6, 8, 3});
  auto r = Resize(batch, {{"mode", ir::Attribute::String("stretch")}, {"size", ir::Attribute::Ints({3, 4})}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].shape(), (Shape{2, 3, 3, 4}));
  Tensor second = Tensor::Alloc(DType::kUInt8, {6, 8, 3});
  std::copy_n(batch.data<uint8_t>() + 144, 144, second.mutable_data<uint8_t>());
  auto one = Resize(second, {{"mode", ir::Attribute::String("stretch")}, {"size", ir::Attribute::Ints({3, 4})}});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(std::vector<float>((*r)[0].data<float>() + 36, (*r)[0].data<float>() + 72), Values<float>((*one)[0]));
}

TEST(ResizeImage, BadInputsAreErrors) {
  auto err = [](const Result<std::vector<Tensor>>& r, const std::string& what) {
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().ToString();
  };
  err(Resize(Tensor::Alloc(DType::kFloat32, {4, 4, 3}), {}), "input 0 of type");
  err(Resize(Ramp({4, 3}), {}), "rank 2");
  err(Resize(Ramp({4, 4, 3}), {{"mode", ir::Attribute::String("crop")}}), "mode must be");
  err(Resize(Ramp({4, 4, 3}), {{"mode", ir::Attribute::String("letterbox")}}), "needs size");
  err(Resize(Ramp({4, 4, 1}), {{"swap_rb", ir::Attribute::Int(1)}}), "swap_rb needs a 3-channel image");
  // Not an image: more channels than an image has, refused before any per-channel table is made.
  err(Resize(Ramp({1, 1, 5}), {}), "5 channels (at most 4)");
  err(Resize(Ramp({4, 4, 3}), {{"mean", ir::Attribute::Floats({1, 2})}}), "mean has 2 values");
  err(Resize(Ramp({4, 4, 3}), {{"std", ir::Attribute::Floats({0})}}), "std value 0");
  // 5 x 2000 under max 960: 2 rows round to 0.
  err(Resize(Ramp({5, 2000, 1}),
             {{"limit_type", ir::Attribute::String("max")}, {"limit_side_len", ir::Attribute::Int(960)}}),
      "(empty)");
  // 1 x 10000 under min 736: 7.36 M columns.
  err(Resize(Ramp({1, 10000, 1}), {}), "over the limit");
}

}  // namespace
}  // namespace sampan::ops
