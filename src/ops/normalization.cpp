// BatchNormalization, LayerNormalization, InstanceNormalization,
// GroupNormalization, LpNormalization, MeanVarianceNormalization,
// RMSNormalization, LRN. Float types only; statistics are computed in double.
#include <algorithm>
#include <cmath>

#include "ops/reduce_util.h"

namespace sampan::ops {
namespace {

// ---------------------------------------------------------------- helpers

// Checks that a parameter input (scale, bias, mean...) is 1-D of length `c`
// where both are known.
Status ExpectVector(const InferContext& ctx, size_t i, const char* what, const ir::Dim& c) {
  if (!ctx.has_input(i)) return Status::Ok();
  const auto& d = ctx.input_dims(i);
  if (!d) return Status::Ok();
  if (d->size() != 1) return ctx.Error("'", what, "' must be 1-D, got rank ", d->size());
  if (c.known() && (*d)[0].known() && (*d)[0].value != c.value)
    return ctx.Error("'", what, "' must have ", c.value, " elements, got ", (*d)[0].value);
  return Status::Ok();
}

// Checks that input i is unidirectionally broadcastable to `target` where known.
Status ExpectBroadcastableTo(const InferContext& ctx, size_t i, const char* what, const ir::Dims& target) {
  if (!ctx.has_input(i)) return Status::Ok();
  const auto& d = ctx.input_dims(i);
  if (!d) return Status::Ok();
  if (d->size() > target.size())
    return ctx.Error("'", what, "' of rank ", d->size(), " cannot broadcast to the normalized rank ", target.size());
  const size_t off = target.size() - d->size();
  for (size_t k = 0; k < d->size(); ++k) {
    const ir::Dim& a = (*d)[k];
    const ir::Dim& b = target[k + off];
    if (a.known() && b.known() && a.value != 1 && a.value != b.value)
      return ctx.Error("'", what, "' dimension ", k, " is ", a.value, ", cannot broadcast to ", b.value);
  }
  return Status::Ok();
}

// Parameter tensor t broadcast to `target` (validated by inference) as doubles.
std::vector<double> ExpandParam(const Tensor& t, const Shape& target) {
  const std::vector<double> v = ToDoubleVector(t);
  if (t.shape() == target) return v;
  std::vector<double> out(static_cast<size_t>(NumElements(target)));
  ForEachBroadcast<1>(target, {t.shape()}, [&](int64_t i, const std::array<int64_t, 1>& o) {
    out[static_cast<size_t>(i)] = v[static_cast<size_t>(o[0])];
  });
  return out;
}

Status ExpectFloatInputs(const InferContext& ctx) {
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) SP_RETURN_IF_ERROR(ExpectDType(ctx, i, kFloatTypes));
  return Status::Ok();
}

// The stash_type attribute as a float DType.
Result<DType> StashType(const InferContext& ctx) {
  const int64_t st = ctx.node().attr_int("stash_type", 1);
  if (st < 0 || st > 23 || !IsKnownDType(static_cast<int32_t>(st)) || !IsFloatDType(static_cast<DType>(st)))
    return ctx.Error("stash_type ", st, " is not a floating-point type");
  return static_cast<DType>(st);
}

// Mean/variance of n contiguous values.
template <class T>
void MeanVar(const T* p, int64_t n, double* mean, double* var) {
  using C = ComputeType<T>;
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += static_cast<double>(static_cast<C>(p[j]));
  const double m = n > 0 ? s / static_cast<double>(n) : 0.0;
  double q = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double d = static_cast<double>(static_cast<C>(p[j])) - m;
    q += d * d;
  }
  *mean = m;
  *var = n > 0 ? q / static_cast<double>(n) : 0.0;
}

template <class Fn>
Status DispatchFloat(DType t, Fn&& fn) {
  return DispatchDType(t, [&]<class T>() {
    if constexpr (std::is_floating_point_v<ComputeType<T>>) fn.template operator()<T>();
  });
}

// Rank >= 2 input with channels at dim 1: (N, C, inner).
AxisSplit ChannelSplit(const Shape& s) {
  AxisSplit a{s.empty() ? 1 : s[0], s.size() > 1 ? s[1] : 1, 1};
  for (size_t d = 2; d < s.size(); ++d) a.inner *= s[d];
  return a;
}

// ---------------------------------------------------------------- BatchNormalization

bool BatchNormTraining(const ir::Node& node, int64_t opset) {
  return opset >= 14 && node.attr_int("training_mode", 0) != 0;
}

Status InferBatchNorm(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(5, 5));
  SP_RETURN_IF_ERROR(ExpectFloatInputs(ctx));
  const ir::Node& node = ctx.node();
  if (ctx.opset() < 9 && node.attr_int("spatial", 1) == 0)
    return ctx.NotSupported("spatial=0 (per-activation statistics)");
  const bool training = BatchNormTraining(node, ctx.opset());
  if (!training)
    for (size_t i = 1; i < ctx.num_outputs(); ++i)
      if (node.output(i) != nullptr)
        return ctx.NotSupported(ctx.opset() < 14 ? "training outputs (mean/var/saved_mean/saved_var)"
                                                 : "running_mean/running_var outputs without training_mode=1");
  if (training && ctx.num_outputs() > 3) return ctx.Error("expects at most 3 outputs in opset >= 14");
  const int64_t rank = ctx.input_rank(0);
  if (rank >= 0 && rank < 2) return ctx.Error("X must have rank >= 2 (N x C x ...), got rank ", rank);
  const ir::Dim c = rank >= 2 ? (*ctx.input_dims(0))[1] : ir::Dim::Unknown();
  static const char* kNames[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (size_t i = 1; i < 5; ++i) SP_RETURN_IF_ERROR(ExpectVector(ctx, i, kNames[i], c));
  if (ctx.input_dtype(1) != ctx.input_dtype(2)) return ctx.Error("scale and B must have the same type");
  if (ctx.input_dtype(3) != ctx.input_dtype(4)) return ctx.Error("input_mean and input_var must have the same type");
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_dims(0));
  for (size_t i = 1; i < ctx.num_outputs() && i < 3; ++i) ctx.set_output(i, ctx.input_dtype(3), ir::Dims{c});
  return Status::Ok();
}

Status RunBatchNorm(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const AxisSplit s = ChannelSplit(x.shape());
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const std::vector<double> scale = ToDoubleVector(ctx.in(1)), bias = ToDoubleVector(ctx.in(2));
  std::vector<double> mean = ToDoubleVector(ctx.in(3)), var = ToDoubleVector(ctx.in(4));
  const bool training = BatchNormTraining(ctx.node, ctx.opset);
  Tensor& y = ctx.out(0);
  return DispatchFloat(x.dtype(), [&]<class T>() {
    using C = ComputeType<T>;
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    if (training) {
      // Batch statistics over every axis but 1; running stats blend with momentum.
      const double momentum = ctx.node.attr_float("momentum", 0.9f);
      const double count = static_cast<double>(s.outer * s.inner);
      std::vector<double> bm(static_cast<size_t>(s.n), 0.0), bv(static_cast<size_t>(s.n), 0.0);
      for (int64_t n = 0; n < s.outer; ++n)
        for (int64_t c = 0; c < s.n; ++c) {
          const T* p = px + (n * s.n + c) * s.inner;
          for (int64_t j = 0; j < s.inner; ++j) bm[static_cast<size_t>(c)] += static_cast<double>(static_cast<C>(p[j]));
        }
      for (double& m : bm) m = count > 0 ? m / count : 0.0;
      for (int64_t n = 0; n < s.outer; ++n)
        for (int64_t c = 0; c < s.n; ++c) {
          const T* p = px + (n * s.n + c) * s.inner;
          const double m = bm[static_cast<size_t>(c)];
          for (int64_t j = 0; j < s.inner; ++j) {
            const double d = static_cast<double>(static_cast<C>(p[j])) - m;
            bv[static_cast<size_t>(c)] += d * d;
          }
        }
      for (double& v : bv) v = count > 0 ? v / count : 0.0;
      for (size_t i = 1; i < ctx.outputs.size() && i < 3; ++i) {
        if (ctx.node.output(i) == nullptr) continue;
        const std::vector<double>& running = i == 1 ? mean : var;
        const std::vector<double>& batch = i == 1 ? bm : bv;
        std::vector<double> r(batch.size());
        for (size_t c = 0; c < r.size(); ++c) r[c] = running[c] * momentum + batch[c] * (1.0 - momentum);
        ctx.out(i) = Tensor::FromVector(ctx.in(3).dtype(), r, Shape{s.n});
      }
      mean = bm;
      var = bv;
    }
    for (int64_t n = 0; n < s.outer; ++n)
      for (int64_t c = 0; c < s.n; ++c) {
        const size_t ci = static_cast<size_t>(c);
        const double a = scale[ci] / std::sqrt(var[ci] + eps);
        const double b = bias[ci] - mean[ci] * a;
        const T* p = px + (n * s.n + c) * s.inner;
        T* q = py + (n * s.n + c) * s.inner;
        for (int64_t j = 0; j < s.inner; ++j)
          q[j] = ConvertElement<T>(static_cast<C>(static_cast<double>(static_cast<C>(p[j])) * a + b));
      }
  });
}

// ---------------------------------------------------------------- LayerNormalization / RMSNormalization

// Output dims for Mean / InvStdDev: X dims[:axis] + 1s.
ir::Dims StatDims(const ir::Dims& x, int64_t axis) {
  ir::Dims d(x.begin(), x.begin() + axis);
  d.resize(x.size(), ir::Dim::Known(1));
  return d;
}

template <bool kRms>
Status InferLayerNorm(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, kRms ? 2 : 3));
  SP_RETURN_IF_ERROR(ExpectFloatInputs(ctx));
  SP_ASSIGN_OR_RETURN(DType stash, StashType(ctx));
  if (!kRms && ctx.num_outputs() > 3) return ctx.Error("expects at most 3 outputs");
  if (kRms && ctx.num_outputs() > 1) return ctx.Error("expects 1 output");
  const int64_t rank = ctx.input_rank(0);
  if (rank < 0) {
    for (size_t i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, i == 0 ? ctx.input_dtype(0) : stash, std::nullopt);
    return Status::Ok();
  }
  SP_ASSIGN_OR_RETURN(int64_t axis, NormalizeAxis(ctx, ctx.node().attr_int("axis", -1), rank));
  const ir::Dims& x = *ctx.input_dims(0);
  const ir::Dims normalized(x.begin() + axis, x.end());
  SP_RETURN_IF_ERROR(ExpectBroadcastableTo(ctx, 1, "Scale", normalized));
  if (!kRms) SP_RETURN_IF_ERROR(ExpectBroadcastableTo(ctx, 2, "B", normalized));
  ctx.set_output(0, ctx.input_dtype(0), x);
  for (size_t i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, stash, StatDims(x, axis));
  return Status::Ok();
}

template <bool kRms>
Status RunLayerNorm(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const int64_t axis = WrapAxis(ctx.node.attr_int("axis", -1), x.rank());
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const AxisSplit s = FlattenAtAxis(x.shape(), axis);
  const Shape normalized(x.shape().begin() + axis, x.shape().end());
  const std::vector<double> scale = ExpandParam(ctx.in(1), normalized);
  const std::vector<double> bias =
      ctx.has_input(2) ? ExpandParam(ctx.in(2), normalized) : std::vector<double>(static_cast<size_t>(s.n), 0.0);
  std::vector<double> means(static_cast<size_t>(s.outer)), invs(static_cast<size_t>(s.outer));
  Tensor& y = ctx.out(0);
  SP_RETURN_IF_ERROR(DispatchFloat(x.dtype(), [&]<class T>() {
    using C = ComputeType<T>;
    for (int64_t o = 0; o < s.outer; ++o) {
      const T* p = x.data<T>() + o * s.n;
      T* q = y.mutable_data<T>() + o * s.n;
      double mean = 0, var = 0;
      if constexpr (kRms) {
        for (int64_t j = 0; j < s.n; ++j) {
          const double v = static_cast<double>(static_cast<C>(p[j]));
          var += v * v;
        }
        var = s.n > 0 ? var / static_cast<double>(s.n) : 0.0;
      } else {
        MeanVar(p, s.n, &mean, &var);
      }
      const double inv = 1.0 / std::sqrt(var + eps);
      means[static_cast<size_t>(o)] = mean;
      invs[static_cast<size_t>(o)] = inv;
      for (int64_t j = 0; j < s.n; ++j) {
        const size_t ji = static_cast<size_t>(j);
        const double v = (static_cast<double>(static_cast<C>(p[j])) - mean) * inv;
        q[j] = ConvertElement<T>(static_cast<C>(v * scale[ji] + bias[ji]));
      }
    }
  }));
  if constexpr (!kRms) {
    Shape stat_shape(x.shape().begin(), x.shape().begin() + axis);
    stat_shape.resize(x.shape().size(), 1);
    for (size_t i = 1; i < ctx.outputs.size() && i < 3; ++i) {
      if (ctx.node.output(i) == nullptr) continue;
      const DType dt = ctx.infer ? ctx.infer->output(i).dtype : DType::kFloat32;
      ctx.out(i) = Tensor::FromVector(dt, i == 1 ? means : invs, stat_shape);
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- InstanceNormalization / GroupNormalization

Status InferInstanceNorm(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(3, 3));
  SP_RETURN_IF_ERROR(ExpectFloatInputs(ctx));
  const int64_t rank = ctx.input_rank(0);
  if (rank >= 0 && rank < 2) return ctx.Error("input must have rank >= 2 (N x C x ...), got rank ", rank);
  const ir::Dim c = rank >= 2 ? (*ctx.input_dims(0))[1] : ir::Dim::Unknown();
  SP_RETURN_IF_ERROR(ExpectVector(ctx, 1, "scale", c));
  SP_RETURN_IF_ERROR(ExpectVector(ctx, 2, "B", c));
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_dims(0));
  return Status::Ok();
}

// Normalizes each (n, group) block of `group_channels` channels x inner
// elements; per-channel (or per-group) affine afterwards.
template <class T>
void GroupNormTyped(const Tensor& x, Tensor& y, int64_t groups, const std::vector<double>& scale,
                    const std::vector<double>& bias, bool per_group_affine, double eps) {
  using C = ComputeType<T>;
  const AxisSplit s = ChannelSplit(x.shape());
  const int64_t cg = s.n / groups;
  const int64_t block = cg * s.inner;
  const T* px = x.data<T>();
  T* py = y.mutable_data<T>();
  for (int64_t n = 0; n < s.outer; ++n)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t base = (n * groups + g) * block;
      double mean, var;
      MeanVar(px + base, block, &mean, &var);
      const double inv = 1.0 / std::sqrt(var + eps);
      for (int64_t c = 0; c < cg; ++c) {
        const size_t pi = static_cast<size_t>(per_group_affine ? g : g * cg + c);
        const double a = scale[pi] * inv;
        const double b = bias[pi] - mean * a;
        const T* p = px + base + c * s.inner;
        T* q = py + base + c * s.inner;
        for (int64_t j = 0; j < s.inner; ++j)
          q[j] = ConvertElement<T>(static_cast<C>(static_cast<double>(static_cast<C>(p[j])) * a + b));
      }
    }
}

Status RunInstanceNorm(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const std::vector<double> scale = ToDoubleVector(ctx.in(1)), bias = ToDoubleVector(ctx.in(2));
  const int64_t channels = x.rank() > 1 ? x.dim(1) : 1;
  return DispatchFloat(x.dtype(), [&]<class T>() {
    GroupNormTyped<T>(x, ctx.out(0), channels, scale, bias, /*per_group_affine=*/true, eps);
  });
}

bool GroupNormPerGroupAffine(int64_t opset) {
  return opset < 21;
}

Status InferGroupNorm(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(3, 3));
  SP_RETURN_IF_ERROR(ExpectFloatInputs(ctx));
  SP_RETURN_IF_ERROR(StashType(ctx).status());
  SP_ASSIGN_OR_RETURN(int64_t groups, ctx.node().required_int("num_groups"));
  if (groups <= 0) return ctx.Error("num_groups must be positive, got ", groups);
  const int64_t rank = ctx.input_rank(0);
  if (rank >= 0 && rank < 2) return ctx.Error("X must have rank >= 2 (N x C x ...), got rank ", rank);
  const ir::Dim c = rank >= 2 ? (*ctx.input_dims(0))[1] : ir::Dim::Unknown();
  if (c.known() && c.value % groups != 0)
    return ctx.Error("the channel count ", c.value, " is not divisible by num_groups ", groups);
  const ir::Dim pc = GroupNormPerGroupAffine(ctx.opset()) ? ir::Dim::Known(groups) : c;
  SP_RETURN_IF_ERROR(ExpectVector(ctx, 1, "scale", pc));
  SP_RETURN_IF_ERROR(ExpectVector(ctx, 2, "bias", pc));
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_dims(0));
  return Status::Ok();
}

Status RunGroupNorm(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const int64_t groups = ctx.node.attr_int("num_groups", 1);
  const std::vector<double> scale = ToDoubleVector(ctx.in(1)), bias = ToDoubleVector(ctx.in(2));
  const bool per_group = GroupNormPerGroupAffine(ctx.opset);
  return DispatchFloat(x.dtype(),
                       [&]<class T>() { GroupNormTyped<T>(x, ctx.out(0), groups, scale, bias, per_group, eps); });
}

// ---------------------------------------------------------------- LpNormalization

Status InferLpNorm(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectFloatInputs(ctx));
  const int64_t p = ctx.node().attr_int("p", 2);
  if (p != 1 && p != 2) return ctx.Error("p must be 1 or 2, got ", p);
  const int64_t rank = ctx.input_rank(0);
  if (rank >= 0) SP_RETURN_IF_ERROR(NormalizeAxis(ctx, ctx.node().attr_int("axis", -1), rank).status());
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_dims(0));
  return Status::Ok();
}

Status RunLpNorm(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const int64_t axis = WrapAxis(ctx.node.attr_int("axis", -1), x.rank());
  const bool l1 = ctx.node.attr_int("p", 2) == 1;
  const AxisSplit s = SplitAtAxis(x.shape(), axis);
  Tensor& y = ctx.out(0);
  return DispatchFloat(x.dtype(), [&]<class T>() {
    using C = ComputeType<T>;
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    for (int64_t o = 0; o < s.outer; ++o)
      for (int64_t i = 0; i < s.inner; ++i) {
        const int64_t base = o * s.n * s.inner + i;
        double norm = 0;
        for (int64_t k = 0; k < s.n; ++k) {
          const double v = static_cast<double>(static_cast<C>(px[base + k * s.inner]));
          norm += l1 ? std::fabs(v) : v * v;
        }
        if (!l1) norm = std::sqrt(norm);
        // A zero norm gives 0, not 0/0 = NaN (the ONNX reference since 1.20).
        for (int64_t k = 0; k < s.n; ++k) {
          const int64_t e = base + k * s.inner;
          const double v = norm == 0 ? 0.0 : static_cast<double>(static_cast<C>(px[e])) / norm;
          py[e] = ConvertElement<T>(static_cast<C>(v));
        }
      }
  });
}

// ---------------------------------------------------------------- MeanVarianceNormalization

Result<std::vector<char>> MvnMask(const ir::Node& node, int64_t rank) {
  const std::vector<int64_t> axes = node.attr_ints("axes", {0, 2, 3});
  std::vector<char> mask(static_cast<size_t>(rank), 0);
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) return InvalidArgument(node.Label(), ": axis ", a, " is out of range for rank ", rank);
    char& m = mask[static_cast<size_t>(a < 0 ? a + rank : a)];
    if (m) return InvalidArgument(node.Label(), ": axis ", a, " is repeated in 'axes'");
    m = 1;
  }
  return mask;
}

Status InferMvn(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectFloatInputs(ctx));
  const int64_t rank = ctx.input_rank(0);
  if (rank >= 0) SP_RETURN_IF_ERROR(MvnMask(ctx.node(), rank).status());
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_dims(0));
  return Status::Ok();
}

Status RunMvn(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  SP_ASSIGN_OR_RETURN(auto mask, MvnMask(ctx.node, x.rank()));
  const ReducePlan plan = MakeReducePlan(x.shape(), mask);
  if (plan.in_numel == 0) return Status::Ok();
  const double count = static_cast<double>(plan.in_numel / plan.out_numel);
  Tensor& y = ctx.out(0);
  return DispatchFloat(x.dtype(), [&]<class T>() {
    using C = ComputeType<T>;
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    auto val = [&](int64_t i) { return static_cast<double>(static_cast<C>(px[i])); };
    std::vector<double> mean(static_cast<size_t>(plan.out_numel), 0.0), var(mean.size(), 0.0);
    ForEachReduceRun(plan, [&](int64_t i0, int64_t o0, int64_t n, int64_t step) {
      for (int64_t j = 0; j < n; ++j) mean[static_cast<size_t>(o0 + j * step)] += val(i0 + j);
    });
    for (double& m : mean) m /= count;
    ForEachReduceRun(plan, [&](int64_t i0, int64_t o0, int64_t n, int64_t step) {
      for (int64_t j = 0; j < n; ++j) {
        const size_t o = static_cast<size_t>(o0 + j * step);
        const double d = val(i0 + j) - mean[o];
        var[o] += d * d;
      }
    });
    for (double& v : var) v = 1.0 / (std::sqrt(v / count) + 1e-9);  // now 1 / (std + eps)
    ForEachReduceRun(plan, [&](int64_t i0, int64_t o0, int64_t n, int64_t step) {
      for (int64_t j = 0; j < n; ++j) {
        const size_t o = static_cast<size_t>(o0 + j * step);
        py[i0 + j] = ConvertElement<T>(static_cast<C>((val(i0 + j) - mean[o]) * var[o]));
      }
    });
  });
}

// ---------------------------------------------------------------- LRN

Status InferLrn(InferContext& ctx) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(1, 1));
  SP_RETURN_IF_ERROR(ExpectFloatInputs(ctx));
  SP_ASSIGN_OR_RETURN(int64_t size, ctx.node().required_int("size"));
  if (size <= 0) return ctx.Error("size must be positive, got ", size);
  const int64_t rank = ctx.input_rank(0);
  if (rank >= 0 && rank < 2) return ctx.Error("input must have rank >= 2 (N x C x ...), got rank ", rank);
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_dims(0));
  return Status::Ok();
}

Status RunLrn(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const int64_t size = ctx.node.attr_int("size", 1);
  const double alpha = ctx.node.attr_float("alpha", 1e-4f);
  const double beta = ctx.node.attr_float("beta", 0.75f);
  const double bias = ctx.node.attr_float("bias", 1.0f);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;  // floor / ceil of (size-1)/2
  const AxisSplit s = ChannelSplit(x.shape());
  Tensor& y = ctx.out(0);
  return DispatchFloat(x.dtype(), [&]<class T>() {
    using C = ComputeType<T>;
    const T* px = x.data<T>();
    T* py = y.mutable_data<T>();
    std::vector<double> sq(static_cast<size_t>(s.inner));
    for (int64_t n = 0; n < s.outer; ++n)
      for (int64_t c = 0; c < s.n; ++c) {
        std::fill(sq.begin(), sq.end(), 0.0);
        const int64_t lo = std::max<int64_t>(0, c - before), hi = std::min<int64_t>(s.n - 1, c + after);
        for (int64_t k = lo; k <= hi; ++k) {
          const T* p = px + (n * s.n + k) * s.inner;
          for (int64_t j = 0; j < s.inner; ++j) {
            const double v = static_cast<double>(static_cast<C>(p[j]));
            sq[static_cast<size_t>(j)] += v * v;
          }
        }
        const T* p = px + (n * s.n + c) * s.inner;
        T* q = py + (n * s.n + c) * s.inner;
        for (int64_t j = 0; j < s.inner; ++j) {
          const double d = std::pow(bias + alpha / static_cast<double>(size) * sq[static_cast<size_t>(j)], beta);
          q[j] = ConvertElement<T>(static_cast<C>(static_cast<double>(static_cast<C>(p[j])) / d));
        }
      }
  });
}

SAMPAN_REGISTER_OP("BatchNormalization", InferBatchNorm, RunBatchNorm);
SAMPAN_REGISTER_OP("LayerNormalization", InferLayerNorm<false>, RunLayerNorm<false>);
SAMPAN_REGISTER_OP("RMSNormalization", InferLayerNorm<true>, RunLayerNorm<true>);
SAMPAN_REGISTER_OP("InstanceNormalization", InferInstanceNorm, RunInstanceNorm);
SAMPAN_REGISTER_OP("GroupNormalization", InferGroupNorm, RunGroupNorm);
SAMPAN_REGISTER_OP("LpNormalization", InferLpNorm, RunLpNorm);
SAMPAN_REGISTER_OP("MeanVarianceNormalization", InferMvn, RunMvn);
SAMPAN_REGISTER_OP("LRN", InferLrn, RunLrn);

}  // namespace
}  // namespace sampan::ops
