// Quantize family: QuantizeLinear and DequantizeLinear (default domain and sampan::, the latter
// with the newest opset's semantics) with per-tensor or per-axis scales and zero points, which
// may be computed on the device. Blocked scales, float8 fnuz, 2/4-bit, float4/float6 types and
// e8m0 or float64 scales stay on the host.
#include <memory>
#include <optional>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/families.h"
#include "backends/cuda/quantize.h"

namespace sampan::cuda {
namespace {

std::optional<QFloat> QFloatOf(DType t) {
  switch (t) {
    case DType::kFloat32:
      return QFloat::kF32;
    case DType::kFloat16:
      return QFloat::kF16;
    case DType::kBFloat16:
      return QFloat::kBF16;
    default:
      return std::nullopt;
  }
}

std::optional<QType> QTypeOf(DType t) {
  switch (t) {
    case DType::kInt8:
      return QType::kI8;
    case DType::kUInt8:
      return QType::kU8;
    case DType::kInt16:
      return QType::kI16;
    case DType::kUInt16:
      return QType::kU16;
    case DType::kInt32:
      return QType::kI32;
    case DType::kFloat8E4M3FN:
      return QType::kE4M3;
    case DType::kFloat8E5M2:
      return QType::kE5M2;
    default:
      return std::nullopt;
  }
}

class QuantizeKernel : public NodeKernel {
 public:
  QuantizeKernel(const QuantParams& p, bool quantize) : p_(p), quantize_(quantize) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    const void* zp = p_.has_zp ? in[2] : nullptr;
    SP_CUDA(quantize_ ? LaunchQuantize(p_, in[0], in[1], zp, out[0], env.stream)
                      : LaunchDequantize(p_, in[0], in[1], zp, out[0], env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "quantize"; }

 private:
  QuantParams p_;
  bool quantize_;
};

// What both ops share: inputs, layout, blocked or not, and the scale (and zero point) layout
// over x's storage. Fills p.n, p.per_axis, p.inner, p.axis_len, p.scale, p.has_zp.
Status CommonParams(const KernelRequest& r, QuantParams* p) {
  const ir::Node& node = r.node;
  if (r.in.size() < 2 || r.in.size() > 3 || !r.in[0].present || !r.in[1].present || r.out.empty())
    return Unsupported(node.Label(), ": expects x, scale and an optional zero point");
  const Shape& x = r.in[0].shape;
  if (r.out[0].shape != x) return Unsupported(node.Label(), ": output shape differs from the input's");
  if (const int64_t block = node.attr_int("block_size", 0); block != 0)
    return Unsupported(node.Label(), ": blocked quantization (block_size ", block, ")");
  const bool cl = r.opt.input_nhwc(0);
  if (cl != r.opt.out_nhwc) return Unsupported(node.Label(), ": layout (channels-last on one side only)");
  if (cl && x.size() != 4) return Unsupported(node.Label(), ": layout (channels-last rank ", x.size(), ")");
  for (size_t i = 1; i < r.in.size(); ++i)
    if (r.opt.input_nhwc(i)) return Unsupported(node.Label(), ": layout of input ", i);
  const auto st = QFloatOf(r.in[1].dtype);
  if (!st) return Unsupported(node.Label(), ": scale of type ", DTypeName(r.in[1].dtype));
  p->scale = *st;
  p->has_zp = r.in.size() > 2 && r.in[2].present;
  const Shape& s = r.in[1].shape;
  const int64_t ns = NumElements(s);
  if (p->has_zp && NumElements(r.in[2].shape) != ns)
    return Unsupported(node.Label(), ": zero point ", ShapeToString(r.in[2].shape), " does not match scale ",
                       ShapeToString(s));
  p->n = NumElements(x);
  if (ns == 1) return Status::Ok();  // per tensor whatever `axis` says, as the reference
  const int64_t rank = static_cast<int64_t>(x.size());
  int64_t axis = node.attr_int("axis", 1);
  if (axis < 0) axis += rank;
  if (s.size() != 1 || axis < 0 || axis >= rank || s[0] != x[static_cast<size_t>(axis)])
    return Unsupported(node.Label(), ": scale ", ShapeToString(s), " is neither per tensor nor per axis ",
                       node.attr_int("axis", 1), " of ", ShapeToString(x));
  // The axis in storage order: channels-last keeps [N, C, H, W] as [N, H, W, C].
  Shape dims = x;
  if (cl) {
    dims = {x[0], x[2], x[3], x[1]};
    static constexpr int64_t kStorageAxis[4] = {0, 3, 1, 2};
    axis = kStorageAxis[axis];
  }
  p->per_axis = true;
  p->axis_len = dims[static_cast<size_t>(axis)];
  p->inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < dims.size(); ++d) p->inner *= dims[d];
  return Status::Ok();
}

}  // namespace

Result<KernelChoice> MakeQuantize(const KernelRequest& r) {
  const ir::Node& node = r.node;
  QuantParams p;
  SP_RETURN_IF_ERROR(CommonParams(r, &p));
  const auto xt = QFloatOf(r.in[0].dtype);
  if (!xt) return Unsupported(node.Label(), ": input of type ", DTypeName(r.in[0].dtype));
  p.x = *xt;
  const DType out = r.out[0].dtype;
  const auto q = QTypeOf(out);
  if (!q || *q == QType::kI32) return Unsupported(node.Label(), ": quantized type ", DTypeName(out));
  p.q = *q;
  if (p.has_zp && r.in[2].dtype != out)
    return Unsupported(node.Label(), ": zero point of type ", DTypeName(r.in[2].dtype), " for a ", DTypeName(out),
                       " output");
  // The quotient's type: `precision`, else NumPy's promotion of x's and the scale's types.
  if (const int64_t prec = node.attr_int("precision", 0); prec != 0) {
    const auto pt = prec > 0 && prec <= 16 ? QFloatOf(static_cast<DType>(prec)) : std::nullopt;
    if (!pt) return Unsupported(node.Label(), ": precision ", prec);
    p.precision = *pt;
  } else {
    p.precision = p.x == p.scale ? p.x : QFloat::kF32;
  }
  const int64_t sat = node.attr_int("saturate", 1);
  if (sat != 0 && sat != 1) return Unsupported(node.Label(), ": saturate ", sat);
  p.saturate = sat != 0;
  if (p.has_zp && (p.q == QType::kE4M3 || p.q == QType::kE5M2) && r.in[2].host != nullptr) {
    const Tensor& z = *r.in[2].host;
    for (int64_t i = 0; i < z.numel(); ++i)
      if (ElementAsDouble(z, i) != 0) return Unsupported(node.Label(), ": nonzero float8 zero point");
  }
  return KernelChoice{false, std::make_unique<QuantizeKernel>(p, true)};
}

Result<KernelChoice> MakeDequantize(const KernelRequest& r) {
  const ir::Node& node = r.node;
  QuantParams p;
  SP_RETURN_IF_ERROR(CommonParams(r, &p));
  const auto q = QTypeOf(r.in[0].dtype);
  if (!q) return Unsupported(node.Label(), ": input of type ", DTypeName(r.in[0].dtype));
  p.q = *q;
  if (p.has_zp && r.in[2].dtype != r.in[0].dtype)
    return Unsupported(node.Label(), ": zero point of type ", DTypeName(r.in[2].dtype), " for a ",
                       DTypeName(r.in[0].dtype), " input");
  const auto yt = QFloatOf(r.out[0].dtype);
  if (!yt) return Unsupported(node.Label(), ": output of type ", DTypeName(r.out[0].dtype));
  p.y = *yt;
  if (p.has_zp && (p.q == QType::kE4M3 || p.q == QType::kE5M2) && r.in[2].host != nullptr) {
    const Tensor& z = *r.in[2].host;
    for (int64_t i = 0; i < z.numel(); ++i)
      if (ElementAsDouble(z, i) != 0) return Unsupported(node.Label(), ": nonzero float8 zero point");
  }
  return KernelChoice{false, std::make_unique<QuantizeKernel>(p, false)};
}

}  // namespace sampan::cuda
