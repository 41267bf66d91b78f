// MaxPool (with optional Indices), AveragePool, LpPool and the global pools.
// One generic N-D window walker: per output position the valid taps of each
// spatial dim form a contiguous range, so the window is a small box product.
#include <cmath>
#include <limits>

#include "ops/common.h"
#include "ops/conv_util.h"

namespace sampan::ops {
namespace {

enum class PoolKind { kMax, kAverage, kLp };

struct PoolParams {
  PoolKind kind = PoolKind::kMax;
  SpatialAttrs a;
  SpatialGeometry g;
  bool count_include_pad = false;
  int64_t p = 2;              // LpPool
  int64_t storage_order = 0;  // MaxPool indices: 0 row-major, 1 column-major
};

Status ReadPoolAttrs(const InferContext& ctx, PoolKind kind, size_t r, PoolParams* pp) {
  const ir::Node& node = ctx.node();
  pp->kind = kind;
  SP_ASSIGN_OR_RETURN(pp->a.kernel, node.required_ints("kernel_shape"));
  if (pp->a.kernel.size() != r) return ctx.Error("kernel_shape has ", pp->a.kernel.size(), " values, expected ", r);
  const bool allow_ceil = kind != PoolKind::kLp || ctx.opset() >= 18;
  SP_RETURN_IF_ERROR(ReadSpatialAttrs(node, &pp->a, allow_ceil));
  pp->count_include_pad = node.attr_int("count_include_pad", 0) != 0;
  pp->p = node.attr_int("p", 2);
  if (kind == PoolKind::kLp && pp->p <= 0) return ctx.Error("p must be positive, got ", pp->p);
  pp->storage_order = node.attr_int("storage_order", 0);
  if (pp->storage_order != 0 && pp->storage_order != 1) return ctx.Error("storage_order must be 0 or 1");
  return Status::Ok();
}

template <PoolKind kKind>
Status InferPool(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  if (kKind == PoolKind::kMax)
    SP_RETURN_IF_ERROR(ExpectDType(
        ctx, 0, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8, DType::kUInt8}));
  else
    SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  if (kKind != PoolKind::kMax && ctx.num_outputs() > 1) return ctx.Error("expected 1 output");
  if (ctx.num_outputs() > 2) return ctx.Error("expected at most 2 outputs");
  const DType dt = ctx.input_dtype(0);
  const auto& xd = ctx.input_dims(0);
  if (!xd) {
    for (size_t i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, i == 0 ? dt : DType::kInt64, std::nullopt);
    return Status::Ok();
  }
  if (xd->size() < 3) return ctx.Error("input must have rank >= 3 (N, C, spatial...), got rank ", xd->size());
  PoolParams pp;
  SP_RETURN_IF_ERROR(ReadPoolAttrs(ctx, kKind, xd->size() - 2, &pp));
  SP_ASSIGN_OR_RETURN(ir::Dims out, InferSpatialOutput(ctx, *xd, pp.a, (*xd)[1]));
  ctx.set_output(0, dt, out);
  if (ctx.num_outputs() > 1) ctx.set_output(1, DType::kInt64, out);
  return Status::Ok();
}

// Pools one (n, c) plane. `ind` (may be null) receives flattened input indices
// offset by `ind_base`.
template <PoolKind kKind, class T>
void PoolPlane(const PoolParams& pp, const T* x, T* y, int64_t* ind, int64_t ind_base) {
  using C = ComputeType<T>;
  const SpatialAttrs& a = pp.a;
  const SpatialGeometry& g = pp.g;
  const size_t r = a.rank();
  std::vector<int64_t> oidx(r, 0), lo(r), hi(r), base(r), tidx(r), in_stride(r), cm_stride(r);
  for (size_t d = r, s = 1; d-- > 0;) {
    in_stride[d] = static_cast<int64_t>(s);
    s *= static_cast<size_t>(g.in[d]);
  }
  for (size_t d = 0, s = 1; d < r; ++d) {
    cm_stride[d] = static_cast<int64_t>(s);
    s *= static_cast<size_t>(g.in[d]);
  }
  for (int64_t o = 0; o < g.out_size; ++o) {
    bool empty = false;
    int64_t count_valid = 1, count_pad = 1;
    for (size_t d = 0; d < r; ++d) {
      const int64_t b = oidx[d] * a.strides[d] - g.pad_begin[d];
      const int64_t dil = a.dilations[d], k = a.kernel[d];
      base[d] = b;
      const int64_t t_lo = b >= 0 ? 0 : (-b + dil - 1) / dil;
      const int64_t t_hi = g.in[d] - 1 - b < 0 ? 0 : std::min(k, (g.in[d] - 1 - b) / dil + 1);
      const int64_t t_hi_pad =
          g.in[d] + g.pad_end[d] - 1 - b < 0 ? 0 : std::min(k, (g.in[d] + g.pad_end[d] - 1 - b) / dil + 1);
      lo[d] = t_lo;
      hi[d] = std::max(t_lo, t_hi);
      if (hi[d] <= lo[d]) empty = true;
      count_valid *= hi[d] - lo[d];
      count_pad *= std::max<int64_t>(0, t_hi_pad);
    }
    C acc = kKind == PoolKind::kMax ? std::numeric_limits<C>::lowest() : C(0);
    int64_t arg = -1;
    if (!empty) {
      for (size_t d = 0; d < r; ++d) tidx[d] = lo[d];
      while (true) {
        int64_t off = 0;
        for (size_t d = 0; d < r; ++d) off += (base[d] + tidx[d] * a.dilations[d]) * in_stride[d];
        const C v = static_cast<C>(x[off]);
        if constexpr (kKind == PoolKind::kMax) {
          if (arg < 0 || v > acc || (std::isnan(static_cast<double>(v)) && !std::isnan(static_cast<double>(acc)))) {
            acc = v;
            arg = off;
          }
        } else if constexpr (kKind == PoolKind::kAverage) {
          acc += v;
        } else {
          const C av = std::abs(v);
          acc += pp.p == 1 ? av : pp.p == 2 ? av * av : static_cast<C>(std::pow(av, static_cast<C>(pp.p)));
        }
        size_t d = r;
        while (d-- > 0) {
          if (++tidx[d] < hi[d]) break;
          tidx[d] = lo[d];
        }
        if (d == static_cast<size_t>(-1)) break;
      }
    }
    if constexpr (kKind == PoolKind::kAverage) {
      const int64_t cnt = pp.count_include_pad ? count_pad : count_valid;
      acc = cnt > 0 ? acc / static_cast<C>(cnt) : C(0);
    } else if constexpr (kKind == PoolKind::kLp) {
      acc = pp.p == 1 ? acc : pp.p == 2 ? std::sqrt(acc) : static_cast<C>(std::pow(acc, C(1) / static_cast<C>(pp.p)));
    } else if (arg < 0) {
      acc = C(0);
    }
    y[o] = ConvertElement<T>(acc);
    if (ind) {
      int64_t idx = arg;
      if (arg >= 0 && pp.storage_order == 1) {
        idx = 0;
        int64_t rem = arg;
        for (size_t d = 0; d < r; ++d) {
          const int64_t pos = rem / in_stride[d];
          rem %= in_stride[d];
          idx += pos * cm_stride[d];
        }
      }
      ind[o] = ind_base + std::max<int64_t>(idx, 0);
    }
    for (size_t d = r; d-- > 0;) {
      if (++oidx[d] < g.out[d]) break;
      oidx[d] = 0;
    }
  }
}

template <PoolKind kKind>
Status RunPool(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  PoolParams pp;
  pp.kind = kKind;
  pp.a.kernel = ctx.node.attr_ints("kernel_shape");
  const bool allow_ceil = kKind != PoolKind::kLp || ctx.opset >= 18;
  (void)ReadSpatialAttrs(ctx.node, &pp.a, allow_ceil);
  pp.count_include_pad = ctx.node.attr_int("count_include_pad", 0) != 0;
  pp.p = ctx.node.attr_int("p", 2);
  pp.storage_order = ctx.node.attr_int("storage_order", 0);
  pp.g = ComputeGeometry(pp.a, x.shape());
  const int64_t planes = x.dim(0) * x.dim(1);
  int64_t* ind = nullptr;
  if (ctx.outputs.size() > 1 && ctx.node.output(1) != nullptr && ctx.out(1).defined())
    ind = ctx.out(1).mutable_data<int64_t>();
  Tensor& y = ctx.out(0);
  return DispatchDType(x.dtype(), [&]<class T>() {
    constexpr bool kOk = kKind == PoolKind::kMax ? !std::is_same_v<T, bool> : std::is_floating_point_v<ComputeType<T>>;
    if constexpr (kOk) {
      const T* px = x.data<T>();
      T* py = y.mutable_data<T>();
      for (int64_t pl = 0; pl < planes; ++pl)
        PoolPlane<kKind, T>(pp, px + pl * pp.g.in_size, py + pl * pp.g.out_size,
                            ind ? ind + pl * pp.g.out_size : nullptr, pl * pp.g.in_size);
    }
  });
}

// ---- Global pools ------------------------------------------------------------

Status InferGlobalPool(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  const auto& xd = ctx.input_dims(0);
  if (!xd) {
    ctx.set_output(0, ctx.input_dtype(0), std::nullopt);
    return Status::Ok();
  }
  if (xd->size() < 2) return ctx.Error("input must have rank >= 2, got rank ", xd->size());
  ir::Dims out = *xd;
  for (size_t i = 2; i < out.size(); ++i) out[i] = ir::Dim::Known(1);
  ctx.set_output(0, ctx.input_dtype(0), out);
  return Status::Ok();
}

template <bool kMax>
Status RunGlobalPool(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const int64_t planes = x.rank() >= 2 ? x.dim(0) * x.dim(1) : 0;
  int64_t size = 1;
  for (int64_t d = 2; d < x.rank(); ++d) size *= x.dim(d);
  return DispatchDType(x.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<ComputeType<T>>) {
      using C = ComputeType<T>;
      const T* px = x.data<T>();
      T* py = y.mutable_data<T>();
      for (int64_t pl = 0; pl < planes; ++pl) {
        const T* s = px + pl * size;
        C acc = kMax ? -std::numeric_limits<C>::infinity() : C(0);
        for (int64_t i = 0; i < size; ++i) {
          const C v = static_cast<C>(s[i]);
          if constexpr (kMax)
            acc = (v > acc || std::isnan(v)) ? v : acc;
          else
            acc += v;
        }
        if (!kMax) acc = size > 0 ? acc / static_cast<C>(size) : C(0);
        py[pl] = ConvertElement<T>(acc);
      }
    }
  });
}

SAMPAN_REGISTER_OP("MaxPool", InferPool<PoolKind::kMax>, RunPool<PoolKind::kMax>);
SAMPAN_REGISTER_OP("AveragePool", InferPool<PoolKind::kAverage>, RunPool<PoolKind::kAverage>);
SAMPAN_REGISTER_OP("LpPool", InferPool<PoolKind::kLp>, RunPool<PoolKind::kLp>);
SAMPAN_REGISTER_OP("GlobalAveragePool", InferGlobalPool, RunGlobalPool<false>);
SAMPAN_REGISTER_OP("GlobalMaxPool", InferGlobalPool, RunGlobalPool<true>);

}  // namespace
}  // namespace sampan::ops
