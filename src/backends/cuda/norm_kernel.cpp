#include "backends/cuda/norm_kernel.h"

#include <array>
#include <optional>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/norm.h"

namespace sampan::cuda {
namespace {

std::optional<ParamType> ParamTypeOf(DType t) {
  switch (t) {
    case DType::kFloat32:
      return ParamType::kF32;
    case DType::kFloat16:
      return ParamType::kF16;
    case DType::kBFloat16:
      return ParamType::kBF16;
    case DType::kFloat64:
      return ParamType::kF64;
    default:
      return std::nullopt;
  }
}

// Parameter input i: present, a float type, and `count` elements (any shape of that size).
Result<ParamType> ParamInput(const KernelRequest& r, size_t i, int64_t count, const char* what) {
  const ir::Node& node = r.node;
  if (i >= r.in.size() || !r.in[i].present) return Unsupported(node.Label(), ": missing ", what);
  const auto t = ParamTypeOf(r.in[i].dtype);
  if (!t) return Unsupported(node.Label(), ": ", what, " of type ", DTypeName(r.in[i].dtype));
  if (NumElements(r.in[i].shape) != count)
    return Unsupported(node.Label(), ": ", what, " has ", NumElements(r.in[i].shape), " values, expected ", count);
  if (r.opt.input_nhwc(i)) return Unsupported(node.Label(), ": layout of ", what);
  return *t;
}

class BatchNormKernel : public NodeKernel {
 public:
  BatchNormKernel(FloatType t, std::array<ParamType, 4> pt, int64_t n, int64_t c, int64_t inner, bool cl, float eps,
                  UnaryOp act, float p0, float p1)
      : t_(t), pt_(pt), n_(n), c_(c), inner_(inner), cl_(cl), eps_(eps), act_(act), p0_(p0), p1_(p1) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    const ParamVec p[4] = {{in[1], pt_[0]}, {in[2], pt_[1]}, {in[3], pt_[2]}, {in[4], pt_[3]}};
    SP_CUDA(LaunchBatchNorm(t_, in[0], out[0], p, n_, c_, inner_, cl_, eps_, act_, p0_, p1_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "norm"; }

 private:
  FloatType t_;
  std::array<ParamType, 4> pt_;
  int64_t n_, c_, inner_;
  bool cl_;
  float eps_;
  UnaryOp act_;
  float p0_, p1_;
};

class GroupNormKernel : public NodeKernel {
 public:
  GroupNormKernel(FloatType t, ParamType scale_t, ParamType bias_t, const GroupNormPlan& plan)
      : t_(t), scale_t_(scale_t), bias_t_(bias_t), plan_(plan) {}
  size_t workspace() const override { return plan_.workspace(); }
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    if (env.workspace_bytes < plan_.workspace())
      return Internal("group norm needs ", plan_.workspace(), " workspace bytes, has ", env.workspace_bytes);
    SP_CUDA(LaunchGroupNorm(t_, in[0], out[0], ParamVec{in[1], scale_t_}, ParamVec{in[2], bias_t_}, plan_,
                            env.workspace, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "norm"; }

 private:
  FloatType t_;
  ParamType scale_t_, bias_t_;
  GroupNormPlan plan_;
};

// X of rank >= 2 in a float type, Y of the same type: the data type, or Unsupported.
Result<FloatType> ChannelData(const KernelRequest& r) {
  const ir::Node& node = r.node;
  if (r.in.empty() || !r.in[0].present) return Unsupported(node.Label(), ": no data input");
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(r.in[0].dtype, node));
  if (r.out.empty() || r.out[0].dtype != r.in[0].dtype) return Unsupported(node.Label(), ": output type");
  if (r.in[0].shape.size() < 2) return Unsupported(node.Label(), ": rank ", r.in[0].shape.size(), " input");
  return t;
}

int64_t Inner(const Shape& x) {
  int64_t inner = 1;
  for (size_t d = 2; d < x.size(); ++d) inner *= x[d];
  return inner;
}

// Instance and group normalization: NCHW only; `groups` regions per sample, affine
// parameters per group or per channel.
Result<KernelChoice> MakeGrouped(const KernelRequest& r, int64_t groups, bool per_group_affine) {
  const ir::Node& node = r.node;
  SP_ASSIGN_OR_RETURN(FloatType t, ChannelData(r));
  for (size_t i = 1; i < node.num_outputs(); ++i)
    if (node.output(i)) return Unsupported(node.Label(), ": extra outputs");
  if (r.opt.input_nhwc(0) || r.opt.out_nhwc) return Unsupported(node.Label(), ": layout (channels-last storage)");
  const Shape& x = r.in[0].shape;
  const int64_t c = x[1];
  if (groups <= 0 || c % groups != 0)
    return Unsupported(node.Label(), ": ", c, " channels do not split into ", groups, " groups");
  const int64_t params = per_group_affine ? groups : c;
  SP_ASSIGN_OR_RETURN(ParamType st, ParamInput(r, 1, params, "scale"));
  SP_ASSIGN_OR_RETURN(ParamType bt, ParamInput(r, 2, params, "bias"));
  const GroupNormPlan plan =
      PlanGroupNorm(x[0], c, Inner(x), groups, per_group_affine, node.attr_float("epsilon", 1e-5f));
  return KernelChoice{false, std::make_unique<GroupNormKernel>(t, st, bt, plan)};
}

}  // namespace

Result<KernelChoice> MakeBatchNorm(const KernelRequest& r) {
  const ir::Node& node = r.node;
  SP_ASSIGN_OR_RETURN(FloatType t, ChannelData(r));
  if (r.opset >= 14 && node.attr_int("training_mode", 0) != 0)
    return Unsupported(node.Label(), ": training_mode (batch statistics) runs on the host");
  if (r.opset < 9 && node.attr_int("spatial", 1) == 0)
    return Unsupported(node.Label(), ": spatial=0 (per-activation statistics)");
  for (size_t i = 1; i < node.num_outputs(); ++i)
    if (node.output(i)) return Unsupported(node.Label(), ": mean/variance outputs run on the host");
  const Shape& x = r.in[0].shape;
  const int64_t c = x[1];
  std::array<ParamType, 4> pt;
  static const char* kNames[4] = {"scale", "B", "input_mean", "input_var"};
  for (size_t i = 0; i < 4; ++i) {
    SP_ASSIGN_OR_RETURN(pt[i], ParamInput(r, i + 1, c, kNames[i]));
  }
  // Channels-last storage is an element-wise walk with the channel innermost; converting
  // layouts is the planner's job, so one side in each layout is declined.
  const bool cl = r.opt.input_nhwc(0);
  if (cl != r.opt.out_nhwc) return Unsupported(node.Label(), ": layout (channels-last on one side only)");
  if (cl && x.size() != 4) return Unsupported(node.Label(), ": layout (channels-last rank ", x.size(), ")");
  // sampan::FusedBatchNorm: the activation the CUDA lowering folded in (fused.h).
  UnaryOp act = UnaryOp::kIdentity;
  float p0 = 0, p1 = 0;
  SP_RETURN_IF_ERROR(ActivationOf(node, &act, &p0, &p1));
  return KernelChoice{false, std::make_unique<BatchNormKernel>(t, pt, x[0], c, Inner(x), cl,
                                                               node.attr_float("epsilon", 1e-5f), act, p0, p1)};
}

Result<KernelChoice> MakeInstanceNorm(const KernelRequest& r) {
  SP_RETURN_IF_ERROR(ChannelData(r).status());
  return MakeGrouped(r, r.in[0].shape[1], /*per_group_affine=*/false);
}

Result<KernelChoice> MakeGroupNorm(const KernelRequest& r) {
  const int64_t groups = r.node.attr_int("num_groups", 0);
  // The reference's rule: scale and bias per group before opset 21, per channel from 21.
  return MakeGrouped(r, groups, /*per_group_affine=*/r.opset < 21);
}

}  // namespace sampan::cuda
