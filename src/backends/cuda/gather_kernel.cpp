// Gather family: index lookups along one axis (embedding rows vectorised).
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/families.h"
#include "backends/cuda/gather.h"

namespace sampan::cuda {
namespace {

class GatherKernel : public NodeKernel {
 public:
  GatherKernel(size_t elem, bool i64, int64_t outer, int64_t axis_dim, int64_t inner, int64_t n)
      : elem_(elem), i64_(i64), outer_(outer), axis_dim_(axis_dim), inner_(inner), n_(n) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchGather(elem_, in[0], in[1], i64_, out[0], outer_, axis_dim_, inner_, n_, env.bad_index, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "gather"; }

 private:
  size_t elem_;
  bool i64_;
  int64_t outer_, axis_dim_, inner_, n_;
};

Result<KernelChoice> MakeGather(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out) {
  if (in[1].dtype != DType::kInt64 && in[1].dtype != DType::kInt32) return Unsupported("Gather index type");
  const Shape& x = in[0].shape;
  int64_t axis = node.attr_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(x.size());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x[static_cast<size_t>(i)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < x.size(); ++i) inner *= x[i];
  return KernelChoice{false,
                      std::make_unique<GatherKernel>(DTypeSize(in[0].dtype), in[1].dtype == DType::kInt64, outer,
                                                     x[static_cast<size_t>(axis)], inner, NumElements(in[1].shape))};
}

}  // namespace

Result<KernelChoice> MakeGather(const KernelRequest& r) {
  return MakeGather(r.node, r.in, r.out[0]);
}

}  // namespace sampan::cuda
