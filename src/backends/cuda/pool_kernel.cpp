// Pooling family: 2-D max/average pooling and global pooling, NCHW or channels-last.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/families.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/pool.h"
#include "ops/conv_util.h"

namespace sampan::cuda {
namespace {

class PoolKernel : public NodeKernel {
 public:
  PoolKernel(FloatType t, Pool2dParams p, bool global, int64_t rows, int64_t inner)
      : t_(t), p_(p), global_(global), rows_(rows), inner_(inner) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    if (global_ && p_.in_nhwc)
      SP_CUDA(LaunchGlobalPoolNhwc(t_, in[0], out[0], p_.n, inner_, p_.c, p_.is_max, env.workspace, env.workspace_bytes,
                                   env.stream));
    else if (global_)
      SP_CUDA(LaunchGlobalPool(t_, in[0], out[0], rows_, inner_, p_.is_max, env.stream));
    else
      SP_CUDA(LaunchPool2d(t_, in[0], out[0], p_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "pool"; }
  size_t workspace() const override { return global_ && p_.in_nhwc ? GlobalPoolNhwcWorkspace(p_.n, inner_, p_.c) : 0; }

 private:
  FloatType t_;
  Pool2dParams p_;
  bool global_;
  int64_t rows_, inner_;
};

Result<KernelChoice> MakePool(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out,
                              const KernelOptions& opt) {
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
  const Shape& x = in[0].shape;
  if (x.size() < 3) return Unsupported("pool rank");
  Pool2dParams p;
  p.is_max = node.op_type == "MaxPool" || node.op_type == "GlobalMaxPool";
  if (node.op_type == "GlobalAveragePool" || node.op_type == "GlobalMaxPool") {
    int64_t inner = 1;
    for (size_t i = 2; i < x.size(); ++i) inner *= x[i];
    p.in_nhwc = opt.input_nhwc(0) && x.size() == 4;  // y [N, C, 1, 1] is the same in both layouts
    p.n = x[0];
    p.c = x[1];
    return KernelChoice{false, std::make_unique<PoolKernel>(t, p, true, x[0] * x[1], inner)};
  }
  if (x.size() != 4 || node.num_outputs() > 1 || node.attr_int("storage_order", 0) != 0)
    return Unsupported(node.Label(), ": only 2-D pooling without indices runs on the GPU");
  ops::SpatialAttrs a;
  a.kernel = node.attr_ints("kernel_shape");
  if (a.kernel.size() != 2) return Unsupported("pool kernel rank");
  SP_RETURN_IF_ERROR(ops::ReadSpatialAttrs(node, &a, true));
  const ops::SpatialGeometry g = ops::ComputeGeometry(a, x);
  p.n = x[0];
  p.c = x[1];
  p.h = x[2];
  p.w = x[3];
  p.oh = out.shape[2];
  p.ow = out.shape[3];
  p.kh = static_cast<int>(a.kernel[0]);
  p.kw = static_cast<int>(a.kernel[1]);
  p.sh = static_cast<int>(a.strides[0]);
  p.sw = static_cast<int>(a.strides[1]);
  p.dh = static_cast<int>(a.dilations[0]);
  p.dw = static_cast<int>(a.dilations[1]);
  p.pad_top = static_cast<int>(g.pad_begin[0]);
  p.pad_left = static_cast<int>(g.pad_begin[1]);
  p.count_include_pad = node.attr_int("count_include_pad", 0) != 0;
  p.in_nhwc = opt.input_nhwc(0);
  p.out_nhwc = opt.out_nhwc;
  p.h_padded = x[2] + g.pad_begin[0] + g.pad_end[0];
  p.w_padded = x[3] + g.pad_begin[1] + g.pad_end[1];
  return KernelChoice{false, std::make_unique<PoolKernel>(t, p, false, 0, 0)};
}

}  // namespace

Result<KernelChoice> MakePool(const KernelRequest& r) {
  return MakePool(r.node, r.in, r.out[0], r.opt);
}

}  // namespace sampan::cuda
