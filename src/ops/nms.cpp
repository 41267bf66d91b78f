// NonMaxSuppression: greedy per (batch, class) selection by score with IoU suppression.
#include <algorithm>
#include <cmath>

#include "ops/common.h"

namespace sampan::ops {
namespace {

Status InferNms(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 5));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, {DType::kFloat32, DType::kFloat64, DType::kFloat16}));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  if (ctx.has_input(2) && ctx.input_dtype(2) != DType::kInt64)
    return ctx.Error("max_output_boxes_per_class must be int64, got ", DTypeName(ctx.input_dtype(2)));
  for (size_t i = 3; i < 5; ++i)
    if (ctx.has_input(i) && ctx.input_dtype(i) != DType::kFloat32)
      return ctx.Error("input ", i, " must be float32, got ", DTypeName(ctx.input_dtype(i)));
  const int64_t cpb = ctx.node().attr_int("center_point_box", 0);
  if (cpb != 0 && cpb != 1) return ctx.Error("center_point_box must be 0 or 1, got ", cpb);
  const auto& bd = ctx.input_dims(0);
  const auto& sd = ctx.input_dims(1);
  if (bd && bd->size() != 3) return ctx.Error("boxes must be 3-D [batch, boxes, 4], got rank ", bd->size());
  if (sd && sd->size() != 3) return ctx.Error("scores must be 3-D [batch, classes, boxes], got rank ", sd->size());
  if (bd && (*bd)[2].known() && (*bd)[2].value != 4) return ctx.Error("boxes last dim must be 4, got ", (*bd)[2].value);
  if (bd && sd) {
    const ir::Dim &b0 = (*bd)[0], &s0 = (*sd)[0], &b1 = (*bd)[1], &s2 = (*sd)[2];
    if (b0.known() && s0.known() && b0.value != s0.value)
      return ctx.Error("boxes batch ", b0.value, " != scores batch ", s0.value);
    if (b1.known() && s2.known() && b1.value != s2.value)
      return ctx.Error("boxes count ", b1.value, " != scores box count ", s2.value);
  }
  ctx.set_output(0, DType::kInt64, ir::Dims{ir::Dim::Unknown(), ir::Dim::Known(3)});
  return Status::Ok();
}

Status RunNms(KernelContext& ctx) {
  const Tensor& boxes_t = ctx.in(0);
  const Tensor& scores_t = ctx.in(1);
  const int64_t batches = boxes_t.dim(0), nboxes = boxes_t.dim(1), classes = scores_t.dim(1);
  if (scores_t.dim(0) != batches || scores_t.dim(2) != nboxes || boxes_t.dim(2) != 4)
    return ctx.Error("boxes ", boxes_t.Describe(), " and scores ", scores_t.Describe(), " do not match");
  int64_t max_out = 0;
  if (ctx.has_input(2) && ctx.in(2).numel() > 0) max_out = ElementAsInt64(ctx.in(2), 0);
  double iou_th = 0;
  if (ctx.has_input(3) && ctx.in(3).numel() > 0) iou_th = ElementAsDouble(ctx.in(3), 0);
  const bool has_score_th = ctx.has_input(4) && ctx.in(4).numel() > 0;
  const double score_th = has_score_th ? ElementAsDouble(ctx.in(4), 0) : 0;
  const bool center = ctx.node.attr_int("center_point_box", 0) == 1;

  std::vector<double> boxes(static_cast<size_t>(boxes_t.numel())), scores(static_cast<size_t>(scores_t.numel()));
  for (size_t i = 0; i < boxes.size(); ++i) boxes[i] = ElementAsDouble(boxes_t, static_cast<int64_t>(i));
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = ElementAsDouble(scores_t, static_cast<int64_t>(i));

  // Normalized [ymin, xmin, ymax, xmax] (or [xmin, ymin, xmax, ymax]; IoU is symmetric in the axes).
  std::vector<double> norm(boxes.size());
  for (size_t b = 0; b < boxes.size() / 4; ++b) {
    const double* p = &boxes[b * 4];
    double* q = &norm[b * 4];
    if (center) {
      q[0] = p[0] - p[2] / 2;
      q[2] = p[0] + p[2] / 2;
      q[1] = p[1] - p[3] / 2;
      q[3] = p[1] + p[3] / 2;
    } else {
      q[0] = std::min(p[0], p[2]);
      q[2] = std::max(p[0], p[2]);
      q[1] = std::min(p[1], p[3]);
      q[3] = std::max(p[1], p[3]);
    }
  }
  auto suppress = [&](const double* a, const double* b) {
    const double ix0 = std::max(a[0], b[0]), ix1 = std::min(a[2], b[2]);
    if (ix1 <= ix0) return false;
    const double iy0 = std::max(a[1], b[1]), iy1 = std::min(a[3], b[3]);
    if (iy1 <= iy0) return false;
    const double inter = (ix1 - ix0) * (iy1 - iy0);
    const double a1 = (a[2] - a[0]) * (a[3] - a[1]), a2 = (b[2] - b[0]) * (b[3] - b[1]);
    const double uni = a1 + a2 - inter;
    if (inter <= 0 || a1 <= 0 || a2 <= 0 || uni <= 0) return false;
    return inter / uni > iou_th;
  };

  std::vector<int64_t> out;
  std::vector<int64_t> cand, selected;
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t c = 0; c < classes; ++c) {
      const double* s = &scores[static_cast<size_t>((b * classes + c) * nboxes)];
      cand.clear();
      for (int64_t i = 0; i < nboxes; ++i)
        if (!has_score_th || s[i] > score_th) cand.push_back(i);
      std::stable_sort(cand.begin(), cand.end(), [&](int64_t x, int64_t y) { return s[x] > s[y]; });
      selected.clear();
      for (int64_t i : cand) {
        if (static_cast<int64_t>(selected.size()) >= max_out) break;
        const double* bi = &norm[static_cast<size_t>((b * nboxes + i) * 4)];
        bool keep = true;
        for (int64_t j : selected)
          if (suppress(bi, &norm[static_cast<size_t>((b * nboxes + j) * 4)])) {
            keep = false;
            break;
          }
        if (!keep) continue;
        selected.push_back(i);
        out.insert(out.end(), {b, c, i});
      }
    }
  }
  const int64_t n = static_cast<int64_t>(out.size() / 3);
  Tensor y = Tensor::Alloc(DType::kInt64, {n, 3});
  std::copy(out.begin(), out.end(), y.mutable_data<int64_t>());
  ctx.out(0) = std::move(y);
  return Status::Ok();
}

SAMPAN_REGISTER_OP("NonMaxSuppression", InferNms, RunNms);

}  // namespace
}  // namespace sampan::ops
