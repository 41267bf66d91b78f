// Resize-image family: sampan::ResizeImage (ops/resize_image.cpp) on the device. The geometry
// (mode, sizes, letterbox placement, the transform output) comes from the reference's own
// helpers (ops/image_geometry.h) at the image's concrete shape, so the kernel only resamples,
// places and normalises.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/families.h"
#include "backends/cuda/resize_image.h"
#include "ops/image_geometry.h"

namespace sampan::cuda {
namespace {

constexpr int64_t kMaxOutput = int64_t{1} << 28;  // elements of the tensor output (ops/resize_image.cpp's)
using ops::ResizeMode;

// The reference's errors come back Unsupported: the node stays on the host, which fails with
// the reference's message.
Status OnHost(const ir::Node& node, const Status& st) {
  return Unsupported(node.Label(), ": ", st.message());
}

class ResizeImageKernel : public NodeKernel {
 public:
  explicit ResizeImageKernel(const ResizeImageParams& p) : p_(p) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    float* transform = out.size() > 1 ? static_cast<float*>(out[1]) : nullptr;
    SP_CUDA(
        LaunchResizeImage(static_cast<const uint8_t*>(in[0]), static_cast<float*>(out[0]), transform, p_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "resize image"; }

 private:
  ResizeImageParams p_;
};

}  // namespace

Result<KernelChoice> MakeResizeImage(const KernelRequest& r) {
  const ir::Node& node = r.node;
  const KernelInput& image = r.in[0];
  if (image.dtype != DType::kUInt8)
    return Unsupported(node.Label(), ": image of type ", DTypeName(image.dtype), " (uint8 only)");
  const Shape& s = image.shape;
  if (s.size() != 3 && s.size() != 4) return Unsupported(node.Label(), ": image of rank ", s.size(), " (HWC or NHWC)");
  const size_t off = s.size() - 3;
  const int64_t n = off ? s[0] : 1, h = s[off], w = s[off + 1], c = s[off + 2];
  if (h < 1 || w < 1 || c < 1) return Unsupported(node.Label(), ": empty image ", ShapeToString(s));
  if (c > kMaxResizeImageChannels)
    return Unsupported(node.Label(), ": ", c, " channels (at most ", kMaxResizeImageChannels, ")");
  auto attrs = ops::ReadResizeImageParams(node);
  if (!attrs.ok()) return OnHost(node, attrs.status());
  const ops::ResizeImageAttrs& a = *attrs;
  // mean/std/swap_rb as the reference reads and checks them; its table gives the pad values.
  auto norm = ops::ReadPixelNorm(node, c, true);
  if (!norm.ok()) return OnHost(node, norm.status());
  auto placed = ops::PlaceResizedImage(node, a, h, w);
  if (!placed.ok()) return OnHost(node, placed.status());
  const ops::ResizePlacement& pl = *placed;
  const int64_t oh = a.mode == ResizeMode::kLetterbox ? a.size_h : pl.rh;
  const int64_t ow = a.mode == ResizeMode::kLetterbox ? a.size_w : pl.rw;
  if (n * c * oh * ow > kMaxOutput)
    return Unsupported(node.Label(), ": the output [", n, ", ", c, ", ", oh, ", ", ow, "] is over ", kMaxOutput,
                       " elements");
  const Shape want{n, c, oh, ow};
  if (r.out[0].dtype != DType::kFloat32 || r.out[0].shape != want)
    return Unsupported(node.Label(), ": output ", DTypeName(r.out[0].dtype), ShapeToString(r.out[0].shape),
                       " differs from the computed f32", ShapeToString(want));
  if (r.out.size() > 1 && node.output(1) != nullptr &&
      (r.out[1].dtype != DType::kFloat32 || r.out[1].shape != Shape{4}))
    return Unsupported(node.Label(), ": transform output is not float32 [4]");

  ResizeImageParams p;
  p.n = n, p.h = h, p.w = w, p.c = c;
  p.oh = oh, p.ow = ow;
  p.rh = pl.rh, p.rw = pl.rw, p.top = pl.top, p.left = pl.left;
  p.inv_scale_y = 1.0 / (static_cast<double>(pl.rh) / static_cast<double>(h));
  p.inv_scale_x = 1.0 / (static_cast<double>(pl.rw) / static_cast<double>(w));
  p.copy = pl.rh == h && pl.rw == w;
  p.swap_rb = norm->swap_rb;
  const std::vector<float> mean = node.attr_floats("mean", {127.5f});
  const std::vector<float> stdev = node.attr_floats("std", {127.5f});
  for (int64_t k = 0; k < c; ++k) {
    const size_t i = static_cast<size_t>(k);
    p.mean[k] = mean[mean.size() == 1 ? 0 : i];
    p.stdev[k] = stdev[stdev.size() == 1 ? 0 : i];
    p.pad[k] = norm->Apply(k, static_cast<uint8_t>(a.pad_value));
  }
  p.transform[0] = static_cast<float>(pl.scale_y);
  p.transform[1] = static_cast<float>(pl.scale_x);
  p.transform[2] = static_cast<float>(pl.top);
  p.transform[3] = static_cast<float>(pl.left);
  return KernelChoice{false, std::make_unique<ResizeImageKernel>(p)};
}

}  // namespace sampan::cuda
