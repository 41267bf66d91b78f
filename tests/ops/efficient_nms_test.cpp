// EfficientNMS_TRT (src/ops/efficient_nms.cpp), TensorRT's NMS plugin as an op: thresholds, per-class
// and class-agnostic suppression, the background class, center-size boxes, per-class boxes, the
// sigmoid, max_output_boxes, zero-filled slots, float16, shape inference, and refusals (anchors,
// unknown attributes, bad shapes). A randomised comparison with an independent greedy NMS written
// here (O(n^2), straight from the plugin's documentation) covers many boxes and classes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "ops/op_test_util.h"

namespace sampan::ops {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace)
using Attrs = std::map<std::string, ir::Attribute>;

Result<std::vector<Tensor>> Nms(const Tensor& boxes, const Tensor& scores, Attrs attrs) {
  return RunOneNode("EfficientNMS_TRT", {&boxes, &scores}, std::move(attrs), 17, 4);
}

Tensor F32(Shape s, std::vector<float> v) {
  return Tensor::FromVector<float>(DType::kFloat32, v, std::move(s));
}

Attrs Base(float iou = 0.5f, float score = 0.1f, int64_t max_out = 10) {
  return {{"iou_threshold", ir::Attribute::Float(iou)},      {"score_threshold", ir::Attribute::Float(score)},
          {"max_output_boxes", ir::Attribute::Int(max_out)}, {"background_class", ir::Attribute::Int(-1)},
          {"score_activation", ir::Attribute::Int(0)},       {"box_coding", ir::Attribute::Int(0)},
          {"plugin_version", ir::Attribute::String("1")}};
}

// Four boxes, two classes: box 1 overlaps box 0 (IoU 0.81), box 3 is far away.
const Tensor kBoxes = F32({1, 4, 4}, {0, 0, 10, 10, 1, 1, 10, 10, 20, 20, 30, 30, 50, 50, 60, 60});
const Tensor kScores = F32({1, 4, 2}, {0.9f, 0.0f, 0.8f, 0.7f, 0.05f, 0.6f, 0.3f, 0.2f});

TEST(EfficientNms, KeepsTheBestPerClassAndFillsTheRestWithZeros) {
  auto r = Nms(kBoxes, kScores, Base());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 4u);
  const Tensor &num = (*r)[0], &boxes = (*r)[1], &scores = (*r)[2], &classes = (*r)[3];
  EXPECT_EQ(num.dtype(), DType::kInt32);
  EXPECT_EQ(num.shape(), (Shape{1, 1}));
  EXPECT_EQ(boxes.shape(), (Shape{1, 10, 4}));
  EXPECT_EQ(classes.dtype(), DType::kInt32);
  // Candidates by score: (a0,c0) .9, (a1,c0) .8 [IoU .81 with a0: dropped], (a1,c1) .7, (a2,c1) .6,
  // (a3,c0) .3, (a3,c1) .2; a2,c0 (.05) is under the threshold.
  ASSERT_EQ(num.data<int32_t>()[0], 5);
  const std::vector<float> want_scores = {0.9f, 0.7f, 0.6f, 0.3f, 0.2f};
  const std::vector<int32_t> want_classes = {0, 1, 1, 0, 1};
  const std::vector<int> want_anchor = {0, 1, 2, 3, 3};
  for (int i = 0; i < 5; ++i) {
    EXPECT_FLOAT_EQ(scores.data<float>()[i], want_scores[i]) << i;
    EXPECT_EQ(classes.data<int32_t>()[i], want_classes[i]) << i;
    for (int k = 0; k < 4; ++k)
      EXPECT_EQ(boxes.data<float>()[i * 4 + k], kBoxes.data<float>()[want_anchor[i] * 4 + k]) << i;
  }
  for (int i = 5; i < 10; ++i) {
    EXPECT_EQ(scores.data<float>()[i], 0.f);
    EXPECT_EQ(classes.data<int32_t>()[i], 0);
    for (int k = 0; k < 4; ++k) EXPECT_EQ(boxes.data<float>()[i * 4 + k], 0.f);
  }
}

TEST(EfficientNms, ClassAgnosticBackgroundMaxBoxesAndThresholds) {
  Attrs a = Base();
  a["class_agnostic"] = ir::Attribute::Int(1);
  auto r = Nms(kBoxes, kScores, a);
  ASSERT_TRUE(r.ok());
  // a1's class-1 box now overlaps the kept a0 box; a3 keeps one class.
  EXPECT_EQ((*r)[0].data<int32_t>()[0], 3);
  EXPECT_EQ((*r)[3].data<int32_t>()[1], 1);  // a2, class 1
  a = Base();
  a["background_class"] = ir::Attribute::Int(0);
  r = Nms(kBoxes, kScores, a);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].data<int32_t>()[0], 3);  // only class 1: .7 .6 .2
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*r)[3].data<int32_t>()[i], 1);
  r = Nms(kBoxes, kScores, Base(0.5f, 0.1f, 2));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].data<int32_t>()[0], 2);
  EXPECT_EQ((*r)[1].shape(), (Shape{1, 2, 4}));
  r = Nms(kBoxes, kScores, Base(0.85f));  // IoU .81 < .85: a1 class 0 survives
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].data<int32_t>()[0], 6);
  r = Nms(kBoxes, kScores, Base(0.5f, 0.9f));  // a score equal to the threshold is kept
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].data<int32_t>()[0], 1);
  r = Nms(kBoxes, kScores, Base(0.5f, 0.95f));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].data<int32_t>()[0], 0);
}

TEST(EfficientNms, CenterSizeBoxesComeOutAsCornersAndSigmoidScores) {
  Tensor boxes = F32({1, 2, 4}, {5, 5, 10, 10, 40, 40, 4, 2});
  Tensor logits = F32({1, 2, 1}, {2.0f, -1.0f});
  Attrs a = Base(0.5f, 0.3f);
  a["box_coding"] = ir::Attribute::Int(1);
  a["score_activation"] = ir::Attribute::Int(1);
  auto r = Nms(boxes, logits, a);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].data<int32_t>()[0], 1);  // sigmoid(-1) = .27 < .3
  EXPECT_NEAR((*r)[2].data<float>()[0], 1.f / (1.f + std::exp(-2.f)), 1e-6f);
  const float* b = (*r)[1].data<float>();
  EXPECT_EQ(b[0], 0.f);
  EXPECT_EQ(b[1], 0.f);
  EXPECT_EQ(b[2], 10.f);
  EXPECT_EQ(b[3], 10.f);
}

TEST(EfficientNms, PerClassBoxesAndFloat16) {
  // [1, 2 anchors, 2 classes, 4]: each class has its own box for an anchor.
  Tensor boxes = F32({1, 2, 2, 4}, {0, 0, 10, 10, 100, 100, 110, 110, 0, 0, 10, 10, 100, 100, 110, 110});
  Tensor scores = F32({1, 2, 2}, {0.9f, 0.8f, 0.7f, 0.6f});
  auto r = Nms(boxes, scores, Base());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)[0].data<int32_t>()[0], 2);    // anchor 1 repeats anchor 0's boxes per class: suppressed
  EXPECT_EQ((*r)[1].data<float>()[4], 100.f);  // the second kept: class 1's own box
  auto h = Nms(*CastTensor(boxes, DType::kFloat16), *CastTensor(scores, DType::kFloat16), Base());
  ASSERT_TRUE(h.ok());
  EXPECT_EQ((*h)[1].dtype(), DType::kFloat16);
  EXPECT_EQ((*h)[2].dtype(), DType::kFloat16);
  EXPECT_EQ((*h)[0].data<int32_t>()[0], 2);
}

TEST(EfficientNms, ShapesAreInferredAndWrongInputsNamed) {
  auto t = InferOneNode(
      "EfficientNMS_TRT",
      {ir::TensorType{DType::kFloat16, ir::Dims{ir::Dim::Symbol("N"), ir::Dim::Known(8400), ir::Dim::Known(4)}},
       ir::TensorType{DType::kFloat16, ir::Dims{ir::Dim::Symbol("N"), ir::Dim::Known(8400), ir::Dim::Known(80)}}},
      Base(0.45f, 0.25f, 100), 17, 4);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)[0].ToString(), "i32[N,1]");
  EXPECT_EQ((*t)[1].ToString(), "f16[N,100,4]");
  EXPECT_EQ((*t)[2].ToString(), "f16[N,100]");
  EXPECT_EQ((*t)[3].ToString(), "i32[N,100]");
  Tensor anchors = F32({1, 4, 4}, std::vector<float>(16, 0.f));
  auto r = RunOneNode("EfficientNMS_TRT", {&kBoxes, &kScores, &anchors}, Base(), 17, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("the anchors input"), std::string::npos) << r.status().message();
  Attrs odd = Base();
  odd["clip_boxes"] = ir::Attribute::Int(1);
  r = Nms(kBoxes, kScores, odd);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("attribute 'clip_boxes' is not one of EfficientNMS_TRT's"), std::string::npos);
  Attrs coding = Base();
  coding["box_coding"] = ir::Attribute::Int(2);
  EXPECT_FALSE(Nms(kBoxes, kScores, coding).ok());
  r = Nms(F32({1, 3, 4}, std::vector<float>(12, 0.f)), kScores, Base());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("anchor count 3 != scores' 4"), std::string::npos) << r.status().message();
}

// The plugin's documented algorithm, written independently: filter, sort, greedy suppression.
struct Det {
  float x1, y1, x2, y2, score;
  int cls;
};
std::vector<Det> Greedy(const std::vector<float>& boxes, const std::vector<float>& scores, int anchors, int classes,
                        float iou_t, float score_t, int max_out, bool agnostic) {
  struct C {
    float s;
    int a, c;
  };
  std::vector<C> cand;
  for (int a = 0; a < anchors; ++a)
    for (int c = 0; c < classes; ++c)
      if (scores[a * classes + c] >= score_t) cand.push_back({scores[a * classes + c], a, c});
  std::stable_sort(cand.begin(), cand.end(), [](const C& x, const C& y) { return x.s > y.s; });
  auto iou = [](const Det& p, const Det& q) {
    const float w = std::min(p.x2, q.x2) - std::max(p.x1, q.x1), h = std::min(p.y2, q.y2) - std::max(p.y1, q.y1);
    if (w <= 0 || h <= 0) return 0.f;
    const float u = (p.x2 - p.x1) * (p.y2 - p.y1) + (q.x2 - q.x1) * (q.y2 - q.y1) - w * h;
    return u <= 0 ? 0.f : w * h / u;
  };
  std::vector<Det> kept;
  for (const C& c : cand) {
    if (static_cast<int>(kept.size()) == max_out) break;
    const float* b = &boxes[c.a * 4];
    Det d{b[0], b[1], b[2], b[3], c.s, c.c};
    bool drop = false;
    for (const Det& k : kept) drop |= (agnostic || k.cls == d.cls) && iou(k, d) >= iou_t;
    if (!drop) kept.push_back(d);
  }
  return kept;
}

TEST(EfficientNms, MatchesAnIndependentGreedyNmsOnRandomDetections) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> pos(0.f, 600.f), size(8.f, 120.f), score(0.f, 1.f);
  for (int trial = 0; trial < 6; ++trial) {
    const int batch = 2, anchors = 300, classes = trial % 2 ? 5 : 1;
    const bool agnostic = trial % 3 == 2;
    std::vector<float> boxes(batch * anchors * 4), scores(batch * anchors * classes);
    for (int i = 0; i < batch * anchors; ++i) {
      const float x = pos(rng), y = pos(rng);
      boxes[i * 4 + 0] = x, boxes[i * 4 + 1] = y, boxes[i * 4 + 2] = x + size(rng), boxes[i * 4 + 3] = y + size(rng);
    }
    for (float& s : scores) s = score(rng);
    Attrs a = Base(0.45f, 0.25f, 50);
    a["class_agnostic"] = ir::Attribute::Int(agnostic);
    auto r = Nms(F32({batch, anchors, 4}, boxes), F32({batch, anchors, classes}, scores), a);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (int b = 0; b < batch; ++b) {
      const auto want = Greedy(
          std::vector<float>(boxes.begin() + b * anchors * 4, boxes.begin() + (b + 1) * anchors * 4),
          std::vector<float>(scores.begin() + b * anchors * classes, scores.begin() + (b + 1) * anchors * classes),
          anchors, classes, 0.45f, 0.25f, 50, agnostic);
      ASSERT_EQ((*r)[0].data<int32_t>()[b], static_cast<int32_t>(want.size())) << "trial " << trial;
      for (size_t i = 0; i < want.size(); ++i) {
        const int64_t slot = b * 50 + static_cast<int64_t>(i);
        EXPECT_EQ((*r)[2].data<float>()[slot], want[i].score);
        EXPECT_EQ((*r)[3].data<int32_t>()[slot], want[i].cls);
        EXPECT_EQ((*r)[1].data<float>()[slot * 4], want[i].x1);
        EXPECT_EQ((*r)[1].data<float>()[slot * 4 + 3], want[i].y2);
      }
    }
  }
}

}  // namespace
}  // namespace sampan::ops
