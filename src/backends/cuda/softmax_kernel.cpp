// Softmax family: Softmax and LogSoftmax over one axis (or the coerced 2-D form before opset 13).
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/families.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/softmax.h"

namespace sampan::cuda {
namespace {

class SoftmaxKernel : public NodeKernel {
 public:
  SoftmaxKernel(FloatType t, SoftmaxParams p) : t_(t), p_(p) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchSoftmax(t_, in[0], out[0], p_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "softmax"; }

 private:
  FloatType t_;
  SoftmaxParams p_;
};

Result<KernelChoice> MakeSoftmax(const ir::Node& node, int64_t opset, const std::vector<KernelInput>& in) {
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(in[0].dtype, node));
  const Shape& x = in[0].shape;
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = node.attr_int("axis", opset >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  SoftmaxParams p;
  p.log = node.op_type == "LogSoftmax";
  if (rank == 0) return KernelChoice{false, std::make_unique<SoftmaxKernel>(t, p)};
  axis = std::clamp<int64_t>(axis, 0, rank);
  p.outer = 1;
  for (int64_t i = 0; i < axis; ++i) p.outer *= x[static_cast<size_t>(i)];
  if (opset >= 13) {
    p.n = x[static_cast<size_t>(axis)];
    p.inner = 1;
    for (size_t i = static_cast<size_t>(axis) + 1; i < x.size(); ++i) p.inner *= x[i];
  } else {  // coerced to 2-D at axis
    p.n = 1;
    for (size_t i = static_cast<size_t>(axis); i < x.size(); ++i) p.n *= x[i];
    p.inner = 1;
  }
  return KernelChoice{false, std::make_unique<SoftmaxKernel>(t, p)};
}

}  // namespace

Result<KernelChoice> MakeSoftmax(const KernelRequest& r) {
  return MakeSoftmax(r.node, r.opset, r.in);
}

}  // namespace sampan::cuda
