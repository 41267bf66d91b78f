#include "backends/cuda/cumsum_kernel.h"

#include <memory>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cumsum.h"
#include "backends/cuda/reduce_kernel.h"

namespace sampan::cuda {
namespace {

class CumSumKernel : public NodeKernel {
 public:
  explicit CumSumKernel(const CumSumParams& p) : p_(p) {}
  size_t workspace() const override { return CumSumWorkspace(p_); }
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    if (workspace() > 0 && (env.workspace == nullptr || env.workspace_bytes < workspace()))
      return Internal("cumsum kernel: needs ", workspace(), " bytes of workspace, has ", env.workspace_bytes);
    SP_CUDA(LaunchCumSum(p_, in[0], out[0], workspace() > 0 ? env.workspace : nullptr, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "cumsum"; }

 private:
  CumSumParams p_;
};

}  // namespace

Result<KernelChoice> MakeCumSum(const KernelRequest& r) {
  const ir::Node& node = r.node;
  if (node.op_type != "CumSum") return Unsupported(node.Label(), ": not CumSum");
  if (r.in.size() < 2 || !r.in[0].present || !r.in[1].present || r.out.empty())
    return Unsupported(node.Label(), ": missing inputs");
  const KernelInput& x = r.in[0];
  if (r.opt.input_nhwc(0) || r.opt.out_nhwc) return Unsupported(node.Label(), ": channels-last layout");
  if (r.out[0].dtype != x.dtype || r.out[0].shape != x.shape)
    return Unsupported(node.Label(), ": output type or shape differs from the input's");
  const std::optional<NumType> t = NumTypeOf(x.dtype);
  if (!t) return Unsupported(node.Label(), ": no CUDA kernel for CumSum on ", DTypeName(x.dtype));
  const Tensor* a = r.in[1].host;
  if (a == nullptr) return Unsupported(node.Label(), ": axis computed on the device");
  if (a->dtype() != DType::kInt32 && a->dtype() != DType::kInt64)
    return InvalidArgument(node.Label(), ": 'axis' must be int32 or int64, got ", DTypeName(a->dtype()));
  if (a->numel() != 1 || a->rank() > 1)
    return InvalidArgument(node.Label(), ": 'axis' must be a scalar (or 1 element), got ", a->Describe());
  CumSumParams p;
  p.type = *t;
  p.exclusive = node.attr_int("exclusive", 0) != 0;
  p.reverse = node.attr_int("reverse", 0) != 0;
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank > 0) {  // a scalar is a one-element axis
    int64_t axis = ElementAsInt64(*a, 0);
    if (axis < -rank || axis >= rank)
      return InvalidArgument(node.Label(), ": axis ", axis, " is out of range for rank ", rank);
    if (axis < 0) axis += rank;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t n = x.shape[static_cast<size_t>(d)];
      if (d < axis)
        p.outer *= n;
      else if (d == axis)
        p.n = n;
      else
        p.inner *= n;
    }
  }
  PlanCumSum(&p);
  return KernelChoice{false, std::make_unique<CumSumKernel>(p)};
}

}  // namespace sampan::cuda
