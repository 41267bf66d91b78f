// QLinearMatMul (opsets 10, 21): y = saturate(rint(((a - a_zp) @ (b - b_zp)) * (a_scale * b_scale
// / y_scale)) + y_zp), NumPy matmul semantics on a and b (batch broadcasting, 1-D operands).
// Like the ONNX reference, the multiplier is formed in the scales' type (float16/bfloat16 round
// after each step) and applied to the int32 product in double. a's scale/zero point are per
// tensor (1 element) or per row ([..., M, 1], a's batch dims); b's per tensor or per column
// ([..., 1, N], or [N]); y's per tensor. int8/uint8 only (float8 types: unsupported).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/common.h"
#include "ops/numpy_rounding.h"

namespace sampan::ops {
namespace {

enum Input : size_t { kA = 0, kAScale, kAZp, kB, kBScale, kBZp, kYScale, kYZp };

bool IsInt8Type(DType t) {
  return t == DType::kInt8 || t == DType::kUInt8;
}

// NumPy matmul output dims; nullopt when a rank is unknown.
Result<std::optional<ir::Dims>> MatMulDims(const InferContext& ctx) {
  const auto& ad0 = ctx.input_dims(kA);
  const auto& bd0 = ctx.input_dims(kB);
  if (!ad0 || !bd0) return std::optional<ir::Dims>();
  ir::Dims ad = *ad0, bd = *bd0;
  if (ad.empty() || bd.empty()) return ctx.Error("a and b must have rank >= 1, got ", ad.size(), " and ", bd.size());
  const bool a1 = ad.size() == 1, b1 = bd.size() == 1;
  if (a1) ad.insert(ad.begin(), ir::Dim::Known(1));
  if (b1) bd.push_back(ir::Dim::Known(1));
  const ir::Dim& ka = ad.back();
  const ir::Dim& kb = bd[bd.size() - 2];
  if (ka.known() && kb.known() && ka.value != kb.value)
    return ctx.Error("inner dimensions differ: a has ", ka.value, ", b has ", kb.value);
  ir::Dims abatch(ad.begin(), ad.end() - 2), bbatch(bd.begin(), bd.end() - 2);
  SP_ASSIGN_OR_RETURN(ir::Dims out, BroadcastDims(ctx, abatch, bbatch));
  if (!a1) out.push_back(ad[ad.size() - 2]);
  if (!b1) out.push_back(bd.back());
  return std::optional<ir::Dims>(out);
}

// Checks a (scale, zero point) pair for operand `x` of rank `x_rank`: same shape, and either one
// element or `x`'s shape with dim `unit_dim` (from the end: 1 = last, 2 = second last) set to 1.
Status CheckQuantParams(const InferContext& ctx, size_t scale, size_t zp, size_t x, int unit_dim, const char* name) {
  const auto& sd = ctx.input_dims(scale);
  const auto& zd = ctx.input_dims(zp);
  if (sd && zd) {
    bool same = sd->size() == zd->size();
    for (size_t d = 0; same && d < sd->size(); ++d)
      same = !(*sd)[d].known() || !(*zd)[d].known() || (*sd)[d].value == (*zd)[d].value;
    if (!same) return ctx.Error(name, "_scale and ", name, "_zero_point must have the same shape");
  }
  const auto& xd = ctx.input_dims(x);
  if (!sd || !xd) return Status::Ok();
  int64_t n = 1;
  for (const auto& d : *sd) n = d.known() && n >= 0 ? n * d.value : -1;
  if (n == 1) return Status::Ok();
  const size_t r = xd->size();
  // b's per-column parameters may also be 1-D [N] (they broadcast to [..., 1, N]: onnxruntime
  // writes them so).
  if (unit_dim == 2 && sd->size() == 1 && r >= 1) {
    const ir::Dim& s = (*sd)[0];
    const ir::Dim& last = (*xd)[r - 1];
    if (!s.known() || !last.known() || s.value == last.value) return Status::Ok();
  }
  bool ok = r >= 2 && sd->size() == r;
  for (size_t d = 0; ok && d < r; ++d) {
    const ir::Dim& s = (*sd)[d];
    const int64_t want = d == r - static_cast<size_t>(unit_dim) ? 1 : ((*xd)[d].known() ? (*xd)[d].value : -1);
    ok = !s.known() || want < 0 || s.value == want;
  }
  if (!ok)
    return ctx.Error(name, "_scale must have 1 element or ", name, "'s shape with dim -", unit_dim, " set to 1 (per ",
                     unit_dim == 1 ? "row" : "column", ")");
  return Status::Ok();
}

Status InferQLinearMatMul(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(8, 8));
  for (size_t i : {kA, kB, kYZp})
    if (!IsInt8Type(ctx.input_dtype(i)))
      return ctx.NotSupported("input ", i, " of type ", DTypeName(ctx.input_dtype(i)), " (int8 and uint8 only)");
  if (ctx.input_dtype(kAZp) != ctx.input_dtype(kA))
    return ctx.Error("a_zero_point is ", DTypeName(ctx.input_dtype(kAZp)), " but a is ",
                     DTypeName(ctx.input_dtype(kA)));
  if (ctx.input_dtype(kBZp) != ctx.input_dtype(kB))
    return ctx.Error("b_zero_point is ", DTypeName(ctx.input_dtype(kBZp)), " but b is ",
                     DTypeName(ctx.input_dtype(kB)));
  const DType st = ctx.input_dtype(kAScale);
  const bool float_scales =
      st == DType::kFloat32 || (ctx.opset() >= 21 && (st == DType::kFloat16 || st == DType::kBFloat16));
  if (!float_scales)
    return ctx.Error("a_scale of type ", DTypeName(st), " is not a valid scale type at opset ", ctx.opset());
  for (size_t i : {kBScale, kYScale})
    if (ctx.input_dtype(i) != st)
      return ctx.Error("all scales must have one type: a_scale is ", DTypeName(st), ", input ", i, " is ",
                       DTypeName(ctx.input_dtype(i)));
  SP_RETURN_IF_ERROR(CheckQuantParams(ctx, kAScale, kAZp, kA, 1, "a"));
  SP_RETURN_IF_ERROR(CheckQuantParams(ctx, kBScale, kBZp, kB, 2, "b"));
  for (size_t i : {kYScale, kYZp})
    if (const auto& d = ctx.input_dims(i)) {
      int64_t n = 1;
      for (const auto& v : *d) n = v.known() && n >= 0 ? n * v.value : -1;
      if (n > 1 || n == 0) return ctx.NotSupported("y_scale and y_zero_point must have one element (per tensor)");
    }
  SP_ASSIGN_OR_RETURN(auto dims, MatMulDims(ctx));
  ctx.set_output(0, ctx.input_dtype(kYZp), dims);
  return Status::Ok();
}

// x (int8/uint8) minus its zero point as int32; zp has 1 element or one per `group` consecutive
// elements of x (a: per row, group = K) or per column of each matrix (b: cols = N).
std::vector<int32_t> Shifted(const Tensor& x, const Tensor& zp, int64_t group, int64_t cols) {
  std::vector<int32_t> out(static_cast<size_t>(x.numel()));
  std::vector<int32_t> z(static_cast<size_t>(zp.numel()));
  for (size_t i = 0; i < z.size(); ++i) z[i] = static_cast<int32_t>(ElementAsInt64(zp, static_cast<int64_t>(i)));
  const bool u8 = x.dtype() == DType::kUInt8;
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t zi = 0;
    if (z.size() > 1) zi = cols > 0 ? (i / (group * cols)) * cols + i % cols : i / group;
    const int32_t v = u8 ? int32_t{x.data<uint8_t>()[i]} : int32_t{x.data<int8_t>()[i]};
    out[static_cast<size_t>(i)] = v - z[static_cast<size_t>(zi)];
  }
  return out;
}

float ScaleAt(const Tensor& s, int64_t i) {
  return static_cast<float>(ElementAsDouble(s, s.numel() == 1 ? 0 : i));
}

Status RunQLinearMatMul(KernelContext& ctx) {
  const Tensor& a = ctx.in(kA);
  const Tensor& b = ctx.in(kB);
  Shape as = a.shape(), bs = b.shape();
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  const Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const int64_t na = NumElements(ab), nb = NumElements(bb);
  // Per-row / per-column parameters hold one value per (batch entry, row or column).
  for (auto [s, zp, want, name] : {std::tuple{kAScale, kAZp, na * M, "a"}, std::tuple{kBScale, kBZp, nb * N, "b"}}) {
    const int64_t n = ctx.in(s).numel();
    if (n != 1 && n != want) return ctx.Error(name, "_scale has ", n, " elements, expected 1 or ", want);
    if (ctx.in(zp).numel() != n)
      return ctx.Error(name, "_zero_point has ", ctx.in(zp).numel(), " elements but ", name, "_scale has ", n);
  }
  if (ctx.in(kYScale).numel() != 1 || ctx.in(kYZp).numel() != 1)
    return ctx.Error("y_scale and y_zero_point must have one element");
  const DType st = ctx.in(kAScale).dtype();
  const float ys = static_cast<float>(ElementAsDouble(ctx.in(kYScale), 0));
  const double yzp = static_cast<double>(ElementAsInt64(ctx.in(kYZp), 0));
  const Shape batch = BroadcastShapes({ab, bb});
  Tensor& y = ctx.out(0);
  // a's zero point per row: one per K consecutive elements; b's per column: one per N columns of
  // each K x N matrix.
  const std::vector<int32_t> av = Shifted(a, ctx.in(kAZp), K, 0);
  const std::vector<int32_t> bv = Shifted(b, ctx.in(kBZp), K, N);
  std::vector<int32_t> acc(static_cast<size_t>(M * N));
  return DispatchDType(y.dtype(), [&]<class Q>() {
    if constexpr (std::is_same_v<Q, int8_t> || std::is_same_v<Q, uint8_t>) {
      constexpr double lo = std::numeric_limits<Q>::lowest(), hi = std::numeric_limits<Q>::max();
      Q* py = y.mutable_data<Q>();
      ForEachBroadcast<2>(batch, {ab, bb}, [&](int64_t bi, const std::array<int64_t, 2>& o) {
        // o: a's and b's batch entries (in units of one matrix).
        const int32_t* pa = av.data() + o[0] * M * K;
        const int32_t* pb = bv.data() + o[1] * K * N;
        std::fill(acc.begin(), acc.end(), 0);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t k = 0; k < K; ++k) {
            const uint32_t x = static_cast<uint32_t>(pa[m * K + k]);
            if (x == 0) continue;
            // int32 accumulation wraps, as the spec allows; done unsigned to stay defined.
            for (int64_t n = 0; n < N; ++n) {
              auto& c = acc[static_cast<size_t>(m * N + n)];
              c = static_cast<int32_t>(static_cast<uint32_t>(c) + x * static_cast<uint32_t>(pb[k * N + n]));
            }
          }
        for (int64_t m = 0; m < M; ++m) {
          const float sa = ScaleAt(ctx.in(kAScale), o[0] * M + m);
          for (int64_t n = 0; n < N; ++n) {
            const float sb = ScaleAt(ctx.in(kBScale), o[1] * N + n);
            const float mult = RoundTo<float>(st, RoundTo<float>(st, sa * sb) / ys);
            double v = std::nearbyint(static_cast<double>(acc[static_cast<size_t>(m * N + n)]) * mult + yzp);
            if (std::isnan(v)) v = 0;
            py[bi * M * N + m * N + n] = static_cast<Q>(std::clamp(v, lo, hi));
          }
        }
      });
    }
  });
}

SAMPAN_REGISTER_OP("QLinearMatMul", InferQLinearMatMul, RunQLinearMatMul);

}  // namespace
}  // namespace sampan::ops
