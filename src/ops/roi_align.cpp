// RoiAlign (opset 10, 16+). X [N, C, H, W], rois [R, 4] (x1, y1, x2, y2),
// batch_indices [R] -> Y [R, C, output_height, output_width].
// Follows the ONNX reference / onnxruntime: bilinear samples on a regular grid
// per bin (sampling_ratio, or ceil(roi_size / output_size) when 0); avg mode
// averages them, max mode takes the max over samples of the max of the four
// weighted corner values. coordinate_transformation_mode (opset 16+):
// half_pixel (default) shifts by -0.5; output_half_pixel (the only behaviour
// before opset 16) does not and clamps the roi size to at least 1.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/common.h"

namespace sampan::ops {
namespace {

Status InferRoiAlign(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(3, 3));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 1));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 2, {DType::kInt64, DType::kInt32}));
  const ir::Node& node = ctx.node();
  const std::string mode = node.attr_string("mode", "avg");
  if (mode != "avg" && mode != "max") return ctx.Error("attribute mode must be avg or max, got '", mode, "'");
  const std::string ctm =
      node.attr_string("coordinate_transformation_mode", ctx.opset() >= 16 ? "half_pixel" : "output_half_pixel");
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    return ctx.Error("coordinate_transformation_mode must be half_pixel or output_half_pixel, got '", ctm, "'");
  const int64_t oh = node.attr_int("output_height", 1);
  const int64_t ow = node.attr_int("output_width", 1);
  const int64_t sr = node.attr_int("sampling_ratio", 0);
  if (oh < 1 || ow < 1) return ctx.Error("output_height/output_width must be >= 1, got ", oh, ", ", ow);
  if (sr < 0) return ctx.Error("sampling_ratio must be >= 0, got ", sr);
  const auto& xd = ctx.input_dims(0);
  const auto& rd = ctx.input_dims(1);
  const auto& bd = ctx.input_dims(2);
  if (xd && xd->size() != 4) return ctx.Error("X must be 4-D [N, C, H, W], got rank ", xd->size());
  if (rd && (rd->size() != 2 || ((*rd)[1].known() && (*rd)[1].value != 4)))
    return ctx.Error("rois must be [num_rois, 4]");
  if (bd && bd->size() != 1) return ctx.Error("batch_indices must be 1-D, got rank ", bd->size());
  ir::Dim r = ir::Dim::Unknown();
  if (rd) r = (*rd)[0];
  if (!r.known() && bd) r = (*bd)[0];
  if (rd && bd && (*rd)[0].known() && (*bd)[0].known() && (*rd)[0].value != (*bd)[0].value)
    return ctx.Error("rois has ", (*rd)[0].value, " rows but batch_indices has ", (*bd)[0].value);
  ir::Dim c = xd ? (*xd)[1] : ir::Dim::Unknown();
  ctx.set_output(0, ctx.input_dtype(0), ir::Dims{r, c, ir::Dim::Known(oh), ir::Dim::Known(ow)});
  return Status::Ok();
}

template <class T>
Status RoiAlignTyped(KernelContext& ctx) {
  using Cm = ComputeType<T>;
  const ir::Node& node = ctx.node;
  const Tensor& x = ctx.in(0);
  const Tensor& rois = ctx.in(1);
  const Tensor& bidx = ctx.in(2);
  Tensor& y = ctx.out(0);
  const bool is_max = node.attr_string("mode", "avg") == "max";
  const bool half_pixel = node.attr_string("coordinate_transformation_mode",
                                           ctx.opset >= 16 ? "half_pixel" : "output_half_pixel") == "half_pixel";
  const int64_t ph_n = node.attr_int("output_height", 1);
  const int64_t pw_n = node.attr_int("output_width", 1);
  const int64_t sr = node.attr_int("sampling_ratio", 0);
  const float scale = node.attr_float("spatial_scale", 1.0f);
  const int64_t n_batch = x.dim(0), channels = x.dim(1), height = x.dim(2), width = x.dim(3);
  const int64_t n_rois = rois.dim(0);
  if (bidx.numel() != n_rois) return ctx.Error("batch_indices length ", bidx.numel(), " != num_rois ", n_rois);
  const T* px = x.data<T>();
  const T* pr = rois.data<T>();
  T* py = y.mutable_data<T>();
  using R = Cm;  // coordinate math in the element's compute type, as onnxruntime and the ONNX reference
  const R offset = half_pixel ? R(0.5) : R(0);

  struct Sample {
    int64_t pos[4];
    R w[4];
  };
  std::vector<Sample> samples;
  for (int64_t r = 0; r < n_rois; ++r) {
    const int64_t b = ElementAsInt64(bidx, r);
    if (b < 0 || b >= n_batch) return ctx.Error("batch index ", b, " out of range [0, ", n_batch, ")");
    const R sw = static_cast<R>(static_cast<Cm>(pr[r * 4 + 0])) * scale - offset;
    const R sh = static_cast<R>(static_cast<Cm>(pr[r * 4 + 1])) * scale - offset;
    const R ew = static_cast<R>(static_cast<Cm>(pr[r * 4 + 2])) * scale - offset;
    const R eh = static_cast<R>(static_cast<Cm>(pr[r * 4 + 3])) * scale - offset;
    R rw = ew - sw, rh = eh - sh;
    if (!half_pixel) {
      rw = std::max(rw, R(1));
      rh = std::max(rh, R(1));
    }
    const R bin_h = rh / static_cast<R>(ph_n);
    const R bin_w = rw / static_cast<R>(pw_n);
    const int64_t gh = sr > 0 ? sr : static_cast<int64_t>(std::ceil(rh / static_cast<R>(ph_n)));
    const int64_t gw = sr > 0 ? sr : static_cast<int64_t>(std::ceil(rw / static_cast<R>(pw_n)));
    const int64_t gh_c = std::max<int64_t>(gh, 0), gw_c = std::max<int64_t>(gw, 0);
    const double count = static_cast<R>(std::max<int64_t>(gh_c * gw_c, 1));
    // Precompute sample positions/weights for every bin (shared by all channels).
    samples.clear();
    for (int64_t ph = 0; ph < ph_n; ++ph) {
      for (int64_t pw = 0; pw < pw_n; ++pw) {
        for (int64_t iy = 0; iy < gh_c; ++iy) {
          const R yy = sh + static_cast<R>(ph) * bin_h + (static_cast<R>(iy) + R(0.5)) * bin_h / static_cast<R>(gh_c);
          for (int64_t ix = 0; ix < gw_c; ++ix) {
            const R xx = sw + static_cast<R>(pw) * bin_w + (static_cast<R>(ix) + R(0.5)) * bin_w / static_cast<R>(gw_c);
            Sample s{};
            R yv = yy, xv = xx;
            if (height == 0 || width == 0 || yv < R(-1) || yv > static_cast<R>(height) || xv < R(-1) ||
                xv > static_cast<R>(width)) {
              samples.push_back(s);
              continue;
            }
            if (yv <= 0) yv = 0;
            if (xv <= 0) xv = 0;
            int64_t yl = static_cast<int64_t>(yv), xl = static_cast<int64_t>(xv), yh, xh;
            if (yl >= height - 1) {
              yh = yl = height - 1;
              yv = static_cast<R>(yl);
            } else {
              yh = yl + 1;
            }
            if (xl >= width - 1) {
              xh = xl = width - 1;
              xv = static_cast<R>(xl);
            } else {
              xh = xl + 1;
            }
            const R ly = yv - static_cast<R>(yl), lx = xv - static_cast<R>(xl);
            const R hy = R(1) - ly, hx = R(1) - lx;
            s.pos[0] = yl * width + xl;
            s.pos[1] = yl * width + xh;
            s.pos[2] = yh * width + xl;
            s.pos[3] = yh * width + xh;
            s.w[0] = hy * hx;
            s.w[1] = hy * lx;
            s.w[2] = ly * hx;
            s.w[3] = ly * lx;
            samples.push_back(s);
          }
        }
      }
    }
    const size_t per_bin = static_cast<size_t>(gh_c * gw_c);
    for (int64_t c = 0; c < channels; ++c) {
      const T* plane = px + (b * channels + c) * height * width;
      T* out = py + (r * channels + c) * ph_n * pw_n;
      for (int64_t bin = 0; bin < ph_n * pw_n; ++bin) {
        const Sample* s = samples.data() + static_cast<size_t>(bin) * per_bin;
        double val = 0;
        if (is_max) {
          bool first = true;
          for (size_t k = 0; k < per_bin; ++k) {
            double m = 0;
            for (int q = 0; q < 4; ++q) {
              const double v = s[k].w[q] * static_cast<double>(static_cast<Cm>(plane[s[k].pos[q]]));
              m = q == 0 ? v : std::max(m, v);
            }
            val = first ? m : std::max(val, m);
            first = false;
          }
        } else {
          for (size_t k = 0; k < per_bin; ++k)
            for (int q = 0; q < 4; ++q) val += s[k].w[q] * static_cast<double>(static_cast<Cm>(plane[s[k].pos[q]]));
          val /= count;
        }
        out[bin] = ConvertElement<T>(static_cast<Cm>(val));
      }
    }
  }
  return Status::Ok();
}

Status RunRoiAlign(KernelContext& ctx) {
  Status st = Status::Ok();
  SP_RETURN_IF_ERROR(DispatchDType(ctx.in(0).dtype(), [&]<class T>() {
    if constexpr (kIsReducedFloat<T> || std::is_floating_point_v<T>) st = RoiAlignTyped<T>(ctx);
  }));
  return st;
}

SAMPAN_REGISTER_OP("RoiAlign", InferRoiAlign, RunRoiAlign);

}  // namespace
}  // namespace sampan::ops
