// sampan::FusedConvPool (fuse_conv_pool.h): a stem convolution and the MaxPool after it.
// Tactics: 6000 + v, our fused kernel's configuration v (conv_pool.h), or the two steps
// apart: any of the convolution's own tactics (conv_kernel.cpp's numbering, all below
// 6000) into a workspace buffer, then the pooling kernel. The builder times both kinds,
// so the fusion never makes a stem slower than the two kernels it replaces.
#include "backends/cuda/conv_pool_kernel.h"

#include <algorithm>
#include <optional>

#include "backends/cuda/conv_kernel.h"
#include "backends/cuda/conv_pool.h"
#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/pool.h"
#include "ops/conv_util.h"

namespace sampan::cuda {
namespace {

constexpr int kFusedBase = 6000;
constexpr int kSplitDefault = kFusedBase - 1;  // the convolution's untimed default, then the pool

class ConvPoolKernel : public NodeKernel {
 public:
  Status Init(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out,
              const KernelOptions& opt, const RunEnv& env) {
    SP_ASSIGN_OR_RETURN(type_, FloatOf(in[0].dtype, node));
    const Shape& x = in[0].shape;
    const Shape& w = in[1].shape;
    if (x.size() != 4 || w.size() != 4 || out.shape.size() != 4)
      return Unsupported(node.Label(), ": conv + pool is 2-D only");
    if (type_ == FloatType::kF32) return Unsupported(node.Label(), ": conv + pool runs in FP16/BF16 only");
    if (in.size() > 3 && in[3].present) return Unsupported(node.Label(), ": conv + pool takes no residual");
    ops::SpatialAttrs ca;
    ca.kernel = node.attr_ints("kernel_shape");
    if (ca.kernel.empty()) ca.kernel.assign(w.begin() + 2, w.end());
    SP_RETURN_IF_ERROR(ops::ReadSpatialAttrs(node, &ca, false));
    const ops::SpatialGeometry cg = ops::ComputeGeometry(ca, x);
    ops::SpatialAttrs pa;
    SP_ASSIGN_OR_RETURN(pa, PoolAttrs(node));
    const Shape conv_shape{x[0], w[0], cg.out[0], cg.out[1]};
    const ops::SpatialGeometry pg = ops::ComputeGeometry(pa, conv_shape);
    if (pg.out[0] != out.shape[2] || pg.out[1] != out.shape[3] || out.shape[1] != w[0])
      return Internal(node.Label(), ": pooled output ", ShapeToString(out.shape), " does not match the attributes");
    elem_ = DTypeSize(in[0].dtype);
    has_bias_ = in.size() > 2 && in[2].present;
    out_nhwc_ = opt.out_nhwc;

    // The fused kernel's parameters.
    p_.n = x[0];
    p_.cin = x[1];
    p_.h = x[2];
    p_.w = x[3];
    p_.cout = w[0];
    p_.kh = static_cast<int>(ca.kernel[0]);
    p_.kw = static_cast<int>(ca.kernel[1]);
    p_.sh = static_cast<int>(ca.strides[0]);
    p_.sw = static_cast<int>(ca.strides[1]);
    p_.pad_h = static_cast<int>(cg.pad_begin[0]);
    p_.pad_w = static_cast<int>(cg.pad_begin[1]);
    p_.oh = cg.out[0];
    p_.ow = cg.out[1];
    p_.pk_h = static_cast<int>(pa.kernel[0]);
    p_.pk_w = static_cast<int>(pa.kernel[1]);
    p_.ps_h = static_cast<int>(pa.strides[0]);
    p_.ps_w = static_cast<int>(pa.strides[1]);
    p_.pp_h = static_cast<int>(pg.pad_begin[0]);
    p_.pp_w = static_cast<int>(pg.pad_begin[1]);
    p_.ph = out.shape[2];
    p_.pw = out.shape[3];
    const auto xs = StorageStrides(x, opt.input_nhwc(0));
    for (int i = 0; i < 4; ++i) p_.xs[i] = xs[static_cast<size_t>(i)];
    p_.out_nhwc = out_nhwc_;
    SP_RETURN_IF_ERROR(ActivationOf(node, &p_.act, &p_.act_p0, &p_.act_p1));
    // The capability query (no device) assumes the sm_90 plans are built for.
    int cc_major = 9;
    if (!opt.check_only) {
      int device = 0;
      SP_CUDA(cudaGetDevice(&device));
      SP_CUDA(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device));
    }
    const bool plain = node.attr_int("group", 1) == 1 && ca.dilations[0] == 1 && ca.dilations[1] == 1 &&
                       pa.dilations[0] == 1 && pa.dilations[1] == 1 && cc_major >= 8;
    std::string why = plain ? "" : "grouped or dilated, or a device below sm_80";
    for (int v = 0; plain && v < ConvPoolVariants(); ++v) {
      ConvPoolPlan pl;
      if (PlanConvPool(p_, v, &pl, &why)) fused_.push_back(pl);
    }

    // The two steps apart: the convolution's kernel writes the full-size output (in the
    // pooled output's layout) into the workspace, the pooling kernel reads it.
    KernelOptions co = opt;
    co.algo = opt.algo >= kFusedBase || opt.algo == kSplitDefault ? -1 : opt.algo;
    std::vector<KernelInput> conv_in(in.begin(), in.begin() + std::min<size_t>(in.size(), 3));
    SP_ASSIGN_OR_RETURN(KernelChoice conv, MakeConv(node, conv_in, KernelOutput{in[0].dtype, conv_shape}, co, env));
    conv_ = std::move(conv.kernel);
    conv_bytes_ = Aligned(static_cast<size_t>(NumElements(conv_shape)) * elem_);
    pool_.n = conv_shape[0];
    pool_.c = conv_shape[1];
    pool_.h = conv_shape[2];
    pool_.w = conv_shape[3];
    pool_.oh = out.shape[2];
    pool_.ow = out.shape[3];
    pool_.kh = p_.pk_h;
    pool_.kw = p_.pk_w;
    pool_.sh = p_.ps_h;
    pool_.sw = p_.ps_w;
    pool_.pad_top = p_.pp_h;
    pool_.pad_left = p_.pp_w;
    pool_.is_max = true;
    pool_.in_nhwc = pool_.out_nhwc = out_nhwc_;
    if (opt.check_only) return Status::Ok();

    packed_bytes_ = Aligned(ConvPoolPackedBytes(p_, elem_));
    // A recorded tactic, else (a shape the builder did not time) the first fused configuration.
    if (opt.algo >= kFusedBase) {
      SP_RETURN_IF_ERROR(Select(opt.algo));
    } else if (opt.algo >= 0) {
      fused_sel_ = -1;
    } else {
      fused_sel_ = fused_.empty() ? -1 : 0;
    }
    return Status::Ok();
  }

  size_t device_bytes() const override { return conv_ ? conv_->device_bytes() : 0; }
  size_t workspace() const override {
    if (fused_sel_ >= 0) return packed_bytes_;
    return conv_bytes_ + (conv_ ? conv_->workspace() : 0);
  }
  std::vector<int> Candidates() const override {
    std::vector<int> c;
    for (size_t i = 0; i < fused_.size(); ++i) c.push_back(kFusedBase + fused_[i].variant);
    std::vector<int> conv = conv_ ? conv_->Candidates() : std::vector<int>{};
    if (conv.empty()) c.push_back(kSplitDefault);
    c.insert(c.end(), conv.begin(), conv.end());
    return c;
  }
  Status Select(int algo) override {
    if (algo >= kFusedBase) {
      for (size_t i = 0; i < fused_.size(); ++i)
        if (kFusedBase + fused_[i].variant == algo) {
          fused_sel_ = static_cast<int>(i);
          return Status::Ok();
        }
      return Unsupported("conv + pool: fused configuration ", algo - kFusedBase, " does not apply here");
    }
    fused_sel_ = -1;
    if (algo == kSplitDefault || !conv_) return Status::Ok();
    return conv_->Select(algo);
  }
  int selected() const override {
    if (fused_sel_ >= 0) return kFusedBase + fused_[static_cast<size_t>(fused_sel_)].variant;
    const int c = conv_ ? conv_->selected() : -1;
    return c >= 0 ? c : kSplitDefault;
  }
  const char* family() const override { return fused_sel_ >= 0 ? "conv+pool" : "conv, pool"; }

  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    const void* bias = has_bias_ ? in[2] : nullptr;
    if (fused_sel_ >= 0) {
      if (env.workspace_bytes < packed_bytes_) return Internal("conv + pool: workspace too small");
      SP_CUDA(LaunchPackConvPoolFilters(type_, in[1], env.workspace, p_, env.stream));
      SP_CUDA(LaunchConvMaxPool(type_, in[0], env.workspace, bias, out[0], p_, fused_[static_cast<size_t>(fused_sel_)],
                                env.stream));
      return Status::Ok();
    }
    if (env.workspace_bytes < conv_bytes_) return Internal("conv + pool: workspace too small");
    RunEnv inner = env;
    void* conv_out = env.workspace;
    inner.workspace = static_cast<char*>(env.workspace) + conv_bytes_;
    inner.workspace_bytes = env.workspace_bytes - conv_bytes_;
    std::vector<const void*> conv_in(in.begin(), in.begin() + std::min<size_t>(in.size(), 3));
    SP_RETURN_IF_ERROR(conv_->Run(inner, conv_in, {conv_out}));
    SP_CUDA(LaunchPool2d(type_, conv_out, out[0], pool_, env.stream));
    return Status::Ok();
  }

  //! The MaxPool's attributes, stored with a pool_ prefix on the fused node.
  static Result<ops::SpatialAttrs> PoolAttrs(const ir::Node& node) {
    ops::SpatialAttrs a;
    a.kernel = node.attr_ints("pool_kernel_shape");
    if (a.kernel.size() != 2) return Unsupported(node.Label(), ": pool_kernel_shape must have 2 entries");
    a.strides = node.attr_ints("pool_strides", {1, 1});
    a.pads = node.attr_ints("pool_pads", {0, 0, 0, 0});
    a.dilations = node.attr_ints("pool_dilations", {1, 1});
    a.ceil_mode = node.attr_int("pool_ceil_mode", 0) != 0;
    if (a.strides.size() != 2 || a.pads.size() != 4 || a.dilations.size() != 2)
      return InvalidArgument(node.Label(), ": pool attribute ranks");
    return a;
  }

 private:
  FloatType type_ = FloatType::kF16;
  size_t elem_ = 2;
  bool has_bias_ = false, out_nhwc_ = false;
  ConvPoolParams p_;
  std::vector<ConvPoolPlan> fused_;
  int fused_sel_ = -1;
  size_t packed_bytes_ = 0;
  std::unique_ptr<NodeKernel> conv_;
  size_t conv_bytes_ = 0;
  Pool2dParams pool_;
};

}  // namespace

Result<KernelChoice> MakeConvPool(const KernelRequest& r) {
  auto k = std::make_unique<ConvPoolKernel>();
  SP_RETURN_IF_ERROR(k->Init(r.node, r.in, r.out[0], r.opt, r.env));
  if (r.opt.check_only) return KernelChoice{};
  return KernelChoice{false, std::move(k)};
}

}  // namespace sampan::cuda
