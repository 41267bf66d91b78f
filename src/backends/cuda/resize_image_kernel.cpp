// Resize-image family: sampan::ResizeImage (ops/resize_image.cpp) on the device. The geometry
// (mode, sizes, letterbox placement, the transform output) is worked out here from the node's
// attributes and the image's concrete shape, step for step as the reference does it (its helpers
// are private to it), so the kernel only resamples, places and normalises.
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

constexpr int64_t kMaxSide = 16384;               // ops/resize_image.cpp's limits
constexpr int64_t kMaxOutput = int64_t{1} << 28;  // elements of the tensor output

enum class Mode { kLimitSide, kLetterbox, kStretch };

struct Attrs {
  Mode mode = Mode::kLimitSide;
  int64_t size_h = 0, size_w = 0, limit = 736;
  bool limit_max = false;
  int64_t pad_value = 114;
};

// The reference's attribute errors come back Unsupported: the node stays on the host, which
// fails with the reference's message.
Status ReadAttrs(const ir::Node& node, Attrs* a) {
  auto bad = [&](const auto&... m) { return Unsupported(node.Label(), ": ", m...); };
  const std::string mode = node.attr_string("mode", "limit_side");
  if (mode == "limit_side")
    a->mode = Mode::kLimitSide;
  else if (mode == "letterbox")
    a->mode = Mode::kLetterbox;
  else if (mode == "stretch")
    a->mode = Mode::kStretch;
  else
    return bad("invalid mode '", mode, "'");
  if (a->mode == Mode::kLimitSide) {
    a->limit = node.attr_int("limit_side_len", 736);
    if (a->limit < 1 || a->limit > kMaxSide) return bad("limit_side_len ", a->limit, " out of range");
    const std::string type = node.attr_string("limit_type", "min");
    if (type != "min" && type != "max") return bad("invalid limit_type '", type, "'");
    a->limit_max = type == "max";
  } else {
    const std::vector<int64_t> size = node.attr_ints("size");
    if (size.size() != 2) return bad("size must be (h, w)");
    a->size_h = size[0];
    a->size_w = size[1];
    if (a->size_h < 1 || a->size_w < 1 || a->size_h > kMaxSide || a->size_w > kMaxSide)
      return bad("size (", a->size_h, ", ", a->size_w, ") out of range");
  }
  a->pad_value = node.attr_int("pad_value", 114);
  if (a->pad_value < 0 || a->pad_value > 255) return bad("pad_value ", a->pad_value, " out of range");
  return Status::Ok();
}

// The resized size, its offset in the output and the scales: ops/resize_image.cpp's Place.
struct Placement {
  int64_t rh = 0, rw = 0, top = 0, left = 0;
  double scale_y = 1, scale_x = 1;
};

int64_t PyRound(double v) {
  return static_cast<int64_t>(std::nearbyint(v));
}  // halves to even

Status Place(const ir::Node& node, const Attrs& a, int64_t h, int64_t w, Placement* pl) {
  const double hd = static_cast<double>(h), wd = static_cast<double>(w);
  switch (a.mode) {
    case Mode::kLimitSide: {
      const double lim = static_cast<double>(a.limit);
      double ratio = 1.0;
      if (a.limit_max ? std::max(h, w) > a.limit : std::min(h, w) < a.limit)
        ratio = lim / ((h < w) != a.limit_max ? hd : wd);
      const double rh = std::min(std::trunc(hd * ratio), 1e12), rw = std::min(std::trunc(wd * ratio), 1e12);
      pl->rh = PyRound(rh / 32) * 32;
      pl->rw = PyRound(rw / 32) * 32;
      pl->scale_y = static_cast<double>(pl->rh) / hd;
      pl->scale_x = static_cast<double>(pl->rw) / wd;
      break;
    }
    case Mode::kLetterbox: {
      const double r = std::min(static_cast<double>(a.size_h) / hd, static_cast<double>(a.size_w) / wd);
      pl->rh = PyRound(hd * r);
      pl->rw = PyRound(wd * r);
      pl->top = PyRound(static_cast<double>(a.size_h - pl->rh) / 2 - 0.1);
      pl->left = PyRound(static_cast<double>(a.size_w - pl->rw) / 2 - 0.1);
      pl->scale_y = pl->scale_x = r;
      break;
    }
    case Mode::kStretch:
      pl->rh = a.size_h;
      pl->rw = a.size_w;
      pl->scale_y = static_cast<double>(a.size_h) / hd;
      pl->scale_x = static_cast<double>(a.size_w) / wd;
      break;
  }
  if (pl->rh < 1 || pl->rw < 1 || pl->rh > kMaxSide || pl->rw > kMaxSide)
    return Unsupported(node.Label(), ": a ", h, " x ", w, " image resizes to ", pl->rh, " x ", pl->rw,
                       " (out of range)");
  return Status::Ok();
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
  Attrs a;
  SP_RETURN_IF_ERROR(ReadAttrs(node, &a));
  // mean/std/swap_rb as the reference reads and checks them; its table gives the pad values.
  auto norm = ops::ReadPixelNorm(node, c, true);
  if (!norm.ok()) return Unsupported(node.Label(), ": ", norm.status().message());
  Placement pl;
  SP_RETURN_IF_ERROR(Place(node, a, h, w, &pl));
  const int64_t oh = a.mode == Mode::kLetterbox ? a.size_h : pl.rh, ow = a.mode == Mode::kLetterbox ? a.size_w : pl.rw;
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
