// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
// input/scores [N, C, d1..dk], target/labels [N, d1..dk] (int32/int64),
// optional weight [C]. reduction none/sum/mean (default mean); ignore_index
// (optional attribute) marks targets that contribute nothing (weight 0).
// mean = sum(loss) / sum(weight[target]) over the non-ignored targets.
// SoftmaxCrossEntropyLoss also yields the optional log_prob (= LogSoftmax over
// axis 1 of scores, same shape as scores).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/common.h"

namespace sampan::ops {
namespace {

enum class Reduction { kNone, kSum, kMean };

Result<Reduction> ParseReduction(const InferContext& ctx) {
  const std::string r = ctx.node().attr_string("reduction", "mean");
  if (r == "none") return Reduction::kNone;
  if (r == "sum") return Reduction::kSum;
  if (r == "mean") return Reduction::kMean;
  return ctx.Error("attribute reduction must be none, sum or mean, got '", r, "'");
}

Status InferLoss(InferContext& ctx, bool sce) {
  SP_RETURN_IF_ERROR(ctx.ExpectInputs(2, 3));
  if (ctx.num_outputs() < 1 || ctx.num_outputs() > (sce ? 2u : 1u))
    return ctx.Error("expected ", sce ? "1 or 2 outputs" : "1 output", ", got ", ctx.num_outputs());
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 0, kFloatTypes));
  SP_RETURN_IF_ERROR(ExpectDType(ctx, 1, {DType::kInt32, DType::kInt64}));
  if (ctx.has_input(2)) SP_RETURN_IF_ERROR(ExpectSameDType(ctx, 0, 2));
  SP_ASSIGN_OR_RETURN(const Reduction red, ParseReduction(ctx));
  const DType dt = ctx.input_dtype(0);
  const auto& xd = ctx.input_dims(0);
  const auto& td = ctx.input_dims(1);
  if (xd && xd->size() < 2) return ctx.Error("input must have rank >= 2 ([N, C, ...]), got rank ", xd->size());
  if (xd && td && td->size() + 1 != xd->size())
    return ctx.Error("target rank ", td->size(), " must be input rank ", xd->size(), " - 1");
  if (xd && td) {
    for (size_t i = 0; i < td->size(); ++i) {
      const ir::Dim& a = (*xd)[i == 0 ? 0 : i + 1];
      const ir::Dim& b = (*td)[i];
      if (a.known() && b.known() && a.value != b.value)
        return ctx.Error("target dim ", i, " (", b.value, ") does not match input (", a.value, ")");
    }
  }
  if (ctx.has_input(2)) {
    const auto& wd = ctx.input_dims(2);
    if (wd && wd->size() != 1) return ctx.Error("weight must be 1-D, got rank ", wd->size());
    if (wd && xd && (*wd)[0].known() && (*xd)[1].known() && (*wd)[0].value != (*xd)[1].value)
      return ctx.Error("weight length ", (*wd)[0].value, " does not match C = ", (*xd)[1].value);
  }
  if (red == Reduction::kNone) {
    if (td) {
      ctx.set_output(0, dt, td);
    } else if (xd) {
      ir::Dims d;
      for (size_t i = 0; i < xd->size(); ++i)
        if (i != 1) d.push_back((*xd)[i]);
      ctx.set_output(0, dt, d);
    } else {
      ctx.set_output(0, dt, std::nullopt);
    }
  } else {
    ctx.set_output(0, dt, ir::Dims{});
  }
  if (sce && ctx.num_outputs() > 1) ctx.set_output(1, dt, xd);
  return Status::Ok();
}

Status InferNll(InferContext& ctx) {
  return InferLoss(ctx, false);
}
Status InferSce(InferContext& ctx) {
  return InferLoss(ctx, true);
}

// logp: [N, C, D] as double (D = prod of trailing dims). Writes the loss.
Status NllCore(KernelContext& ctx, const std::vector<double>& logp, int64_t n, int64_t c, int64_t d,
               const Tensor& target, const Tensor* weight, Tensor& out) {
  const std::string r = ctx.node.attr_string("reduction", "mean");
  const Reduction red = r == "none" ? Reduction::kNone : r == "sum" ? Reduction::kSum : Reduction::kMean;
  const bool has_ii = ctx.node.has_attr("ignore_index");
  const int64_t ii = ctx.node.attr_int("ignore_index", 0);
  std::vector<double> w;
  if (weight) {
    w.resize(static_cast<size_t>(c));
    for (int64_t k = 0; k < c; ++k) w[static_cast<size_t>(k)] = ElementAsDouble(*weight, k);
  }
  std::vector<double> loss(static_cast<size_t>(n * d));
  double wsum = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      const int64_t t = ElementAsInt64(target, i * d + j);
      double v = 0;
      if (!(has_ii && t == ii)) {
        if (t < 0 || t >= c) return ctx.Error("target value ", t, " is out of range [0, ", c, ")");
        const double wt = weight ? w[static_cast<size_t>(t)] : 1.0;
        v = -logp[static_cast<size_t>((i * c + t) * d + j)] * wt;
        wsum += wt;
      }
      loss[static_cast<size_t>(i * d + j)] = v;
    }
  }
  return DispatchDType(out.dtype(), [&]<class T>() {
    if constexpr (kIsReducedFloat<T> || std::is_floating_point_v<T>) {
      using C = ComputeType<T>;
      T* po = out.mutable_data<T>();
      if (red == Reduction::kNone) {
        for (size_t k = 0; k < loss.size(); ++k) po[k] = ConvertElement<T>(static_cast<C>(loss[k]));
      } else {
        double s = 0;
        for (double v : loss) s += v;
        if (red == Reduction::kMean) s = s / wsum;  // 0/0 -> NaN, as the ONNX reference
        po[0] = ConvertElement<T>(static_cast<C>(s));
      }
    }
  });
}

void Dims3(const Tensor& x, int64_t* n, int64_t* c, int64_t* d) {
  *n = x.dim(0);
  *c = x.dim(1);
  *d = 1;
  for (int64_t i = 2; i < x.rank(); ++i) *d *= x.dim(i);
}

Status RunNll(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  int64_t n, c, d;
  Dims3(x, &n, &c, &d);
  std::vector<double> logp(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) logp[static_cast<size_t>(i)] = ElementAsDouble(x, i);
  return NllCore(ctx, logp, n, c, d, ctx.in(1), ctx.has_input(2) ? &ctx.in(2) : nullptr, ctx.out(0));
}

Status RunSce(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  int64_t n, c, d;
  Dims3(x, &n, &c, &d);
  std::vector<double> logp(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) logp[static_cast<size_t>(i)] = ElementAsDouble(x, i);
  // LogSoftmax over C for each (n, j).
  for (int64_t i = 0; i < n; ++i) {
    double* base = logp.data() + i * c * d;
    for (int64_t j = 0; j < d; ++j) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < c; ++k) mx = std::max(mx, base[k * d + j]);
      double s = 0;
      for (int64_t k = 0; k < c; ++k) s += std::exp(base[k * d + j] - mx);
      const double lse = mx + std::log(s);
      for (int64_t k = 0; k < c; ++k) base[k * d + j] -= lse;
    }
  }
  if (ctx.outputs.size() > 1 && ctx.out(1).defined()) {
    Tensor& lp = ctx.out(1);
    (void)DispatchDType(lp.dtype(), [&]<class T>() {
      if constexpr (kIsReducedFloat<T> || std::is_floating_point_v<T>) {
        using C = ComputeType<T>;
        T* p = lp.mutable_data<T>();
        for (size_t k = 0; k < logp.size(); ++k) p[k] = ConvertElement<T>(static_cast<C>(logp[k]));
      }
    });
  }
  return NllCore(ctx, logp, n, c, d, ctx.in(1), ctx.has_input(2) ? &ctx.in(2) : nullptr, ctx.out(0));
}

SAMPAN_REGISTER_OP("NegativeLogLikelihoodLoss", InferNll, RunNll);
SAMPAN_REGISTER_OP("SoftmaxCrossEntropyLoss", InferSce, RunSce);

}  // namespace
}  // namespace sampan::ops
