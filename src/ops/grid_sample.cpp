// GridSample (opset 16: 4-D, modes bilinear/nearest/bicubic; opset 20+: N-D,
// modes linear/nearest/cubic — both spellings are accepted).
// X [N, C, D1..Dk], grid [N, O1..Ok, k] with normalized coordinates in [-1, 1]
// stored innermost-dim first (x, y, z) -> Y [N, C, O1..Ok].
// Follows the ONNX reference: denormalize (align_corners), round half to even
// for nearest, fold out-of-range coordinates for border/reflection padding,
// then gather taps with per-index padding (zeros / clamp / reflect).
// Cubic uses the a = -0.75 kernel over 4 taps per dim.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/common.h"

namespace sampan::ops {
namespace {

constexpr int kMaxSpatial = 6;

enum class Mode { kNearest, kLinear, kCubic };
enum class Pad { kZeros, kBorder, kReflection };

Result<Mode> ParseMode(const InferContext& ctx) {
  const std::string m = ctx.node().attr_string("mode", ctx.opset() >= 20 ? "linear" : "bilinear");
  if (m == "nearest") return Mode::kNearest;
  if (m == "bilinear" || m == "linear") return Mode::kLinear;
  if (m == "bicubic" || m == "cubic") return Mode::kCubic;
  return ctx.Error("attribute mode must be linear/bilinear, nearest or cubic/bicubic, got '", m, "'");
}

Status InferGridSample(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 2));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 1, kFloatTypes));
  SP_RETURN_IF_ERROR(ParseMode(ctx).status());
  const std::string pad = ctx.node().attr_string("padding_mode", "zeros");
  if (pad != "zeros" && pad != "border" && pad != "reflection")
    return ctx.Error("attribute padding_mode must be zeros, border or reflection, got '", pad, "'");
  const int64_t ac = ctx.node().attr_int("align_corners", 0);
  if (ac != 0 && ac != 1) return ctx.Error("attribute align_corners must be 0 or 1, got ", ac);
  const auto& xd = ctx.input_dims(0);
  const auto& gd = ctx.input_dims(1);
  if (xd && xd->size() < 3) return ctx.Error("X must have rank >= 3, got ", xd->size());
  if (gd && gd->size() < 3) return ctx.Error("grid must have rank >= 3, got ", gd->size());
  if (xd && gd && xd->size() != gd->size())
    return ctx.Error("X rank ", xd->size(), " and grid rank ", gd->size(), " differ");
  const int64_t rank = xd ? static_cast<int64_t>(xd->size()) : gd ? static_cast<int64_t>(gd->size()) : -1;
  if (rank >= 0) {
    if (ctx.opset() < 20 && rank != 4) return ctx.Error("opset ", ctx.opset(), " GridSample needs 4-D inputs");
    if (rank - 2 > kMaxSpatial) return ctx.NotSupported("more than ", kMaxSpatial, " spatial dims");
    if (gd && gd->back().known() && gd->back().value != rank - 2)
      return ctx.Error("grid's last dim must be ", rank - 2, ", got ", gd->back().value);
  }
  if (xd && gd && (*xd)[0].known() && (*gd)[0].known() && (*xd)[0].value != (*gd)[0].value)
    return ctx.Error("batch of X (", (*xd)[0].value, ") and grid (", (*gd)[0].value, ") differ");
  if (rank < 0) {
    ctx.set_output(0, ctx.input_dtype(0), std::nullopt);
    return Status::Ok();
  }
  if (!gd) {  // rank known from X only
    ir::Dims d(static_cast<size_t>(rank), ir::Dim::Unknown());
    d[0] = (*xd)[0];
    d[1] = (*xd)[1];
    ctx.set_output(0, ctx.input_dtype(0), d);
    return Status::Ok();
  }
  ir::Dims d;
  d.push_back(xd && (*xd)[0].known() ? (*xd)[0] : (*gd)[0]);
  d.push_back(xd ? (*xd)[1] : ir::Dim::Unknown());
  for (size_t i = 1; i + 1 < gd->size(); ++i) d.push_back((*gd)[i]);
  ctx.set_output(0, ctx.input_dtype(0), d);
  return Status::Ok();
}

double Reflect(double x, double lo, double hi) {
  const double rng = hi - lo;
  if (rng <= 0) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const int64_t n = static_cast<int64_t>(dx / rng);
    const double r = dx - static_cast<double>(n) * rng;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const int64_t n = static_cast<int64_t>(dx / rng);
    const double r = dx - static_cast<double>(n) * rng;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

void CubicCoeffs(double x, double c[4]) {
  constexpr double a = -0.75;
  x = std::fabs(x);
  c[0] = ((a * (x + 1) - 5 * a) * (x + 1) + 8 * a) * (x + 1) - 4 * a;
  c[1] = ((a + 2) * x - (a + 3)) * x * x + 1;
  c[2] = ((a + 2) * (1 - x) - (a + 3)) * (1 - x) * (1 - x) + 1;
  c[3] = ((a * (2 - x) - 5 * a) * (2 - x) + 8 * a) * (2 - x) - 4 * a;
}

template <class T>
void GridSampleTyped(KernelContext& ctx, Mode mode, Pad pad, bool align) {
  using Cm = ComputeType<T>;
  const Tensor& x = ctx.in(0);
  const Tensor& grid = ctx.in(1);
  Tensor& y = ctx.out(0);
  const int64_t rank = x.rank();
  const int k = static_cast<int>(rank - 2);
  const int64_t n_batch = x.dim(0), channels = x.dim(1);
  int64_t dims[kMaxSpatial], strides[kMaxSpatial];
  int64_t in_plane = 1;
  for (int i = k - 1; i >= 0; --i) {
    dims[i] = x.dim(i + 2);
    strides[i] = in_plane;
    in_plane *= dims[i];
  }
  int64_t out_plane = 1;
  for (int64_t i = 1; i + 1 < grid.rank(); ++i) out_plane *= grid.dim(i);
  const T* px = x.data<T>();
  T* py = y.mutable_data<T>();
  if (in_plane == 0) {
    for (int64_t i = 0; i < y.numel(); ++i) py[i] = ConvertElement<T>(Cm(0));
    return;
  }
  const int taps = mode == Mode::kNearest ? 1 : mode == Mode::kLinear ? 2 : 4;
  int64_t combos = 1;
  for (int i = 0; i < k; ++i) combos *= taps;
  // Per dim: tap offsets into the plane (-1 = zero padding) and weights.
  int64_t off[kMaxSpatial][4];
  double wt[kMaxSpatial][4];
  std::vector<int64_t> combo_off(static_cast<size_t>(combos));
  std::vector<double> combo_w(static_cast<size_t>(combos));

  auto map_index = [&](int64_t i, int dim) -> int64_t {
    const int64_t d = dims[dim];
    if (pad == Pad::kZeros) return (i >= 0 && i < d) ? i : -1;
    if (pad == Pad::kBorder) return std::clamp<int64_t>(i, 0, d - 1);
    const double lo = align ? 0.0 : -0.5, hi = align ? static_cast<double>(d) - 1 : static_cast<double>(d) - 0.5;
    return std::clamp<int64_t>(static_cast<int64_t>(Reflect(static_cast<double>(i), lo, hi)), 0, d - 1);
  };

  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t p = 0; p < out_plane; ++p) {
      const int64_t gbase = (n * out_plane + p) * k;
      for (int i = 0; i < k; ++i) {
        const double g = ElementAsDouble(grid, gbase + (k - 1 - i));
        const double d = static_cast<double>(dims[i]);
        double v = align ? (g + 1) / 2.0 * (d - 1) : ((g + 1) * d - 1) / 2.0;
        if (mode == Mode::kNearest) v = std::nearbyint(v);
        const double lo = align ? 0.0 : -0.5, hi = align ? d - 1 : d - 0.5;
        if (v < lo || v > hi) {
          if (pad == Pad::kBorder)
            v = std::clamp(v, 0.0, d - 1);
          else if (pad == Pad::kReflection)
            v = Reflect(v, lo, hi);
        }
        if (mode == Mode::kNearest) {
          const int64_t idx = map_index(static_cast<int64_t>(v), i);
          off[i][0] = idx < 0 ? -1 : idx * strides[i];
          wt[i][0] = 1.0;
        } else {
          const double f = std::floor(v);
          const int64_t x0 = static_cast<int64_t>(f);
          const double t = v - f;
          double c[4];
          int64_t first = x0;
          if (mode == Mode::kLinear) {
            c[0] = 1 - t;
            c[1] = t;
          } else {
            CubicCoeffs(t, c);
            first = x0 - 1;
          }
          for (int q = 0; q < taps; ++q) {
            const int64_t idx = map_index(first + q, i);
            off[i][q] = idx < 0 ? -1 : idx * strides[i];
            wt[i][q] = c[q];
          }
        }
      }
      // Tap combinations (product over dims).
      for (int64_t cb = 0; cb < combos; ++cb) {
        int64_t rest = cb, o = 0;
        double w = 1;
        for (int i = k - 1; i >= 0; --i) {
          const int q = static_cast<int>(rest % taps);
          rest /= taps;
          if (o >= 0) o = off[i][q] < 0 ? -1 : o + off[i][q];
          w *= wt[i][q];
        }
        combo_off[static_cast<size_t>(cb)] = o;
        combo_w[static_cast<size_t>(cb)] = w;
      }
      for (int64_t c = 0; c < channels; ++c) {
        const T* plane = px + (n * channels + c) * in_plane;
        double acc = 0;
        for (int64_t cb = 0; cb < combos; ++cb) {
          const int64_t o = combo_off[static_cast<size_t>(cb)];
          if (o >= 0) acc += combo_w[static_cast<size_t>(cb)] * static_cast<double>(static_cast<Cm>(plane[o]));
        }
        py[(n * channels + c) * out_plane + p] = ConvertElement<T>(static_cast<Cm>(acc));
      }
    }
  }
}

Status RunGridSample(KernelContext& ctx) {
  const ir::Node& node = ctx.node;
  const std::string m = node.attr_string("mode", ctx.opset >= 20 ? "linear" : "bilinear");
  const Mode mode = m == "nearest" ? Mode::kNearest : (m == "bicubic" || m == "cubic") ? Mode::kCubic : Mode::kLinear;
  const std::string ps = node.attr_string("padding_mode", "zeros");
  const Pad pad = ps == "border" ? Pad::kBorder : ps == "reflection" ? Pad::kReflection : Pad::kZeros;
  const bool align = node.attr_int("align_corners", 0) != 0;
  const Tensor& x = ctx.in(0);
  const Tensor& grid = ctx.in(1);
  if (grid.rank() != x.rank() || grid.dim(0) != x.dim(0) || grid.dim(grid.rank() - 1) != x.rank() - 2)
    return ctx.Error("grid shape ", ShapeToString(grid.shape()), " does not fit X ", ShapeToString(x.shape()));
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (kIsReducedFloat<T> || std::is_floating_point_v<T>) GridSampleTyped<T>(ctx, mode, pad, align);
  });
}

SAMPAN_REGISTER_OP("GridSample", InferGridSample, RunGridSample);

}  // namespace
}  // namespace sampan::ops
