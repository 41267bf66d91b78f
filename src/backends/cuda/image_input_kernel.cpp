// Image-input family: uint8 NHWC images normalised into the plan's float input.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/families.h"
#include "backends/cuda/image_input.h"
#include "backends/cuda/kernel_util.h"

namespace sampan::cuda {
namespace {

class ImageInputKernel : public NodeKernel {
 public:
  ImageInputKernel(FloatType t, ImageInputParams p) : t_(t), p_(p) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchImageInput(t_, in[0], out[0], p_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "image input"; }

 private:
  FloatType t_;
  ImageInputParams p_;
};

Result<KernelChoice> MakeImageInput(const ir::Node& node, const std::vector<KernelInput>& in, const KernelOutput& out,
                                    const KernelOptions& opt) {
  SP_ASSIGN_OR_RETURN(FloatType t, FloatOf(out.dtype, node));
  const Shape& x = in[0].shape;
  const auto mean = node.attr_floats("mean");
  const auto scale = node.attr_floats("scale");
  if (in[0].dtype != DType::kUInt8 || x.size() != 4 || mean.size() != scale.size() ||
      static_cast<int64_t>(mean.size()) != x[3])
    return Unsupported(node.Label(), ": ImageInput shape/attributes");
  if (x[3] > kMaxImageChannels) return Unsupported(node.Label(), ": more than ", kMaxImageChannels, " channels");
  ImageInputParams p;
  p.n = x[0];
  p.h = x[1];
  p.w = x[2];
  p.c = x[3];
  for (size_t i = 0; i < mean.size(); ++i) {
    p.mean[i] = mean[i];
    p.scale[i] = scale[i];
  }
  p.out_nhwc = node.attr_string("layout", "NCHW") == "NHWC" || opt.out_nhwc;
  return KernelChoice{false, std::make_unique<ImageInputKernel>(t, p)};
}

}  // namespace

Result<KernelChoice> MakeImageInput(const KernelRequest& r) {
  return MakeImageInput(r.node, r.in, r.out[0], r.opt);
}

}  // namespace sampan::cuda
