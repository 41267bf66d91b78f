// EfficientNMS_TRT: TensorRT's batched NMS plugin as an op, with its inputs, attributes and
// outputs, so detectors exported for TensorRT (YOLO with an NMS node, EfficientDet, SSD) load
// unchanged. Registered in the default domain and in "TRT", as exporters write it.
//   boxes:  [N, A, 4] (one box per anchor) or [N, A, C, 4] (one per anchor and class), f32/f16
//   scores: [N, A, C], same type
//   anchors (optional, the fused box decoder): refused, naming it
// Attributes: score_threshold, iou_threshold, max_output_boxes, background_class (-1: none),
// score_activation (sigmoid on the scores), class_agnostic, box_coding (0: corners x1,y1,x2,y2;
// 1: center x,y,w,h), plugin_version ("1"), score_bits (TensorRT's FP16 sort precision; Sampan
// sorts at full precision, its limit).
// Outputs: num_detections int32 [N, 1]; detection_boxes [N, max, 4] (always corners);
// detection_scores [N, max] (after the sigmoid when score_activation); detection_classes int32
// [N, max]. Slots past num_detections are zero.
// Selection, as the plugin documents it: every (anchor, class) whose score reaches
// score_threshold (the sigmoid of it with score_activation), background class excluded, sorted
// by score (ties: lower anchor, then lower class first), the best 4096 taken; greedy NMS keeps a
// candidate unless a kept one of the same class (any class when class_agnostic) overlaps it with
// IoU >= iou_threshold (IoU of the corners put in order; 0 for empty areas); at most
// max_output_boxes per image.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops/common.h"
#include "ops/control_flow.h"  // SetKernelOutput

namespace sampan::ops {
namespace {

constexpr int64_t kMaxCandidates = 4096;  // the plugin's numSelectedBoxes

Status InferEfficientNms(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 3));
  if (ctx.num_outputs() != 4)
    return ctx.Error("has 4 outputs (num_detections, detection_boxes, detection_scores, detection_classes), got ",
                     ctx.num_outputs());
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, {DType::kFloat32, DType::kFloat16}));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  if (ctx.has_input(2))
    return ctx.NotSupported(
        "the anchors input (the plugin's fused box decoder) is not supported: decode the boxes "
        "in the graph and give EfficientNMS_TRT the decoded boxes");
  const ir::Node& n = ctx.node();
  const int64_t coding = n.attr_int("box_coding", 0);
  if (coding != 0 && coding != 1) return ctx.Error("box_coding must be 0 (corners) or 1 (center-size), got ", coding);
  const int64_t max_out = n.attr_int("max_output_boxes", 100);
  if (max_out < 1) return ctx.Error("max_output_boxes must be >= 1, got ", max_out);
  const float iou = n.attr_float("iou_threshold", 0.5f);
  if (!(iou >= 0.f && iou <= 1.f)) return ctx.Error("iou_threshold must be in [0, 1], got ", iou);
  const float score = n.attr_float("score_threshold", 0.f);
  if (!std::isfinite(score)) return ctx.Error("score_threshold must be finite, got ", score);
  for (const char* flag : {"score_activation", "class_agnostic"}) {
    const int64_t v = n.attr_int(flag, 0);
    if (v != 0 && v != 1) return ctx.Error(flag, " must be 0 or 1, got ", v);
  }
  const std::string version = n.attr_string("plugin_version", "1");
  if (version != "1") return ctx.NotSupported("plugin_version '", version, "' (version 1 is implemented)");
  for (const auto& [name, value] : n.attrs) {
    static const char* kKnown[] = {"score_threshold",  "iou_threshold",    "max_output_boxes",
                                   "background_class", "score_activation", "class_agnostic",
                                   "box_coding",       "plugin_version",   "score_bits"};
    if (std::none_of(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return name == k; }))
      return ctx.NotSupported("attribute '", name, "' is not one of EfficientNMS_TRT's");
  }
  const auto& bd = ctx.input_dims(0);
  const auto& sd = ctx.input_dims(1);
  if (bd && bd->size() != 3 && bd->size() != 4)
    return ctx.Error("boxes must be [N, A, 4] or [N, A, C, 4], got rank ", bd->size());
  if (bd && bd->back().known() && bd->back().value != 4)
    return ctx.Error("boxes' last dim must be 4, got ", bd->back().value);
  if (sd && sd->size() != 3) return ctx.Error("scores must be [N, A, C], got rank ", sd->size());
  ir::Dim batch;
  if (sd) {
    batch = (*sd)[0];
  } else if (bd) {
    batch = (*bd)[0];
  }
  if (bd && sd) {
    for (size_t d = 0; d < 2; ++d)
      if ((*bd)[d].known() && (*sd)[d].known() && (*bd)[d].value != (*sd)[d].value)
        return ctx.Error("boxes ", d == 0 ? "batch " : "anchor count ", (*bd)[d].value, " != scores' ", (*sd)[d].value);
    if (bd->size() == 4 && (*bd)[2].known() && (*sd)[2].known() && (*bd)[2].value != (*sd)[2].value)
      return ctx.Error("per-class boxes have ", (*bd)[2].value, " classes, scores ", (*sd)[2].value);
  }
  const DType t = ctx.input_dtype(0);
  const ir::Dim m = ir::Dim::Known(max_out);
  ctx.set_output(0, DType::kInt32, ir::Dims{batch, ir::Dim::Known(1)});
  ctx.set_output(1, t, ir::Dims{batch, m, ir::Dim::Known(4)});
  ctx.set_output(2, t, ir::Dims{batch, m});
  ctx.set_output(3, DType::kInt32, ir::Dims{batch, m});
  return Status::Ok();
}

struct Corner {
  float x1, y1, x2, y2;
};

float Iou(Corner a, Corner b) {
  auto order = [](Corner& c) {
    if (c.x1 > c.x2) std::swap(c.x1, c.x2);
    if (c.y1 > c.y2) std::swap(c.y1, c.y2);
  };
  order(a);
  order(b);
  const float iw = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  const float ih = std::min(a.y2, b.y2) - std::max(a.y1, b.y1);
  if (iw <= 0.f || ih <= 0.f) return 0.f;
  const float inter = iw * ih;
  const float uni = (a.x2 - a.x1) * (a.y2 - a.y1) + (b.x2 - b.x1) * (b.y2 - b.y1) - inter;
  if (uni <= 0.f) return 0.f;
  return inter / uni;
}

Status RunEfficientNms(KernelContext& ctx) {
  const ir::Node& n = ctx.node;
  const Tensor& boxes_in = ctx.in(0);
  const Tensor& scores_in = ctx.in(1);
  const Shape& ss = scores_in.shape();
  const Shape& bs = boxes_in.shape();
  if (ss.size() != 3) return ctx.Error("scores must be [N, A, C], got ", ShapeToString(ss));
  const int64_t batch = ss[0], anchors = ss[1], classes = ss[2];
  const bool per_class = bs.size() == 4;
  const Shape want = per_class ? Shape{batch, anchors, classes, 4} : Shape{batch, anchors, 4};
  if (bs != want)
    return ctx.Error("boxes ", ShapeToString(bs), " do not match scores ", ShapeToString(ss), " (expected ",
                     ShapeToString(want), ")");
  const int64_t max_out = n.attr_int("max_output_boxes", 100);
  const float iou_threshold = n.attr_float("iou_threshold", 0.5f);
  const float score_threshold = n.attr_float("score_threshold", 0.f);
  const int64_t background = n.attr_int("background_class", -1);
  const bool sigmoid = n.attr_int("score_activation", 0) != 0;
  const bool agnostic = n.attr_int("class_agnostic", 0) != 0;
  const bool center = n.attr_int("box_coding", 0) == 1;
  Tensor b32 = boxes_in, s32 = scores_in;
  if (boxes_in.dtype() != DType::kFloat32) {
    SP_ASSIGN_OR_RETURN(b32, CastTensor(boxes_in, DType::kFloat32));
    SP_ASSIGN_OR_RETURN(s32, CastTensor(scores_in, DType::kFloat32));
  }
  const float* boxes = b32.data<float>();
  const float* scores = s32.data<float>();
  auto activate = [&](float s) { return sigmoid ? 1.f / (1.f + std::exp(-s)) : s; };

  Tensor num = Tensor::Alloc(DType::kInt32, {batch, 1});
  Tensor out_boxes = Tensor::Alloc(DType::kFloat32, {batch, max_out, 4});
  Tensor out_scores = Tensor::Alloc(DType::kFloat32, {batch, max_out});
  Tensor out_classes = Tensor::Alloc(DType::kInt32, {batch, max_out});
  std::memset(out_boxes.mutable_raw(), 0, out_boxes.nbytes());
  std::memset(out_scores.mutable_raw(), 0, out_scores.nbytes());
  std::memset(out_classes.mutable_raw(), 0, out_classes.nbytes());

  struct Candidate {
    float score;  // activated
    int64_t anchor, cls;
  };
  std::vector<Candidate> cand;
  std::vector<Corner> kept_box;
  std::vector<int64_t> kept_cls;
  for (int64_t b = 0; b < batch; ++b) {
    cand.clear();
    for (int64_t a = 0; a < anchors; ++a)
      for (int64_t c = 0; c < classes; ++c) {
        if (c == background) continue;
        const float s = activate(scores[(b * anchors + a) * classes + c]);
        if (s >= score_threshold) cand.push_back({s, a, c});
      }
    const auto better = [](const Candidate& x, const Candidate& y) {
      if (x.score != y.score) return x.score > y.score;
      return x.anchor != y.anchor ? x.anchor < y.anchor : x.cls < y.cls;
    };
    const size_t take = std::min<size_t>(cand.size(), kMaxCandidates);
    std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(take), cand.end(), better);
    cand.resize(take);
    kept_box.clear();
    kept_cls.clear();
    for (const Candidate& c : cand) {
      if (static_cast<int64_t>(kept_box.size()) >= max_out) break;
      const float* p =
          per_class ? boxes + ((b * anchors + c.anchor) * classes + c.cls) * 4 : boxes + (b * anchors + c.anchor) * 4;
      Corner box = center ? Corner{p[0] - p[2] * 0.5f, p[1] - p[3] * 0.5f, p[0] + p[2] * 0.5f, p[1] + p[3] * 0.5f}
                          : Corner{p[0], p[1], p[2], p[3]};
      bool suppressed = false;
      for (size_t k = 0; k < kept_box.size() && !suppressed; ++k)
        suppressed = (agnostic || kept_cls[k] == c.cls) && Iou(kept_box[k], box) >= iou_threshold;
      if (suppressed) continue;
      const int64_t slot = b * max_out + static_cast<int64_t>(kept_box.size());
      float* ob = out_boxes.mutable_data<float>() + slot * 4;
      ob[0] = box.x1, ob[1] = box.y1, ob[2] = box.x2, ob[3] = box.y2;
      out_scores.mutable_data<float>()[slot] = c.score;
      out_classes.mutable_data<int32_t>()[slot] = static_cast<int32_t>(c.cls);
      kept_box.push_back(box);
      kept_cls.push_back(c.cls);
    }
    num.mutable_data<int32_t>()[b] = static_cast<int32_t>(kept_box.size());
  }
  if (boxes_in.dtype() != DType::kFloat32) {
    SP_ASSIGN_OR_RETURN(out_boxes, CastTensor(out_boxes, boxes_in.dtype()));
    SP_ASSIGN_OR_RETURN(out_scores, CastTensor(out_scores, boxes_in.dtype()));
  }
  SetKernelOutput(ctx, 0, std::move(num));
  SetKernelOutput(ctx, 1, std::move(out_boxes));
  SetKernelOutput(ctx, 2, std::move(out_scores));
  SetKernelOutput(ctx, 3, std::move(out_classes));
  return Status::Ok();
}

}  // namespace

SAMPAN_REGISTER_OP("EfficientNMS_TRT", InferEfficientNms, RunEfficientNms);
SAMPAN_REGISTER_DOMAIN_OP("TRT", "EfficientNMS_TRT", InferEfficientNms, RunEfficientNms);

}  // namespace sampan::ops
