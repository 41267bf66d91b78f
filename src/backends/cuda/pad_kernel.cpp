#include "backends/cuda/pad_kernel.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/kernel_util.h"
#include "backends/cuda/pad.h"

namespace sampan::cuda {
namespace {

class PadKernel : public NodeKernel {
 public:
  PadKernel(size_t elem, const PadParams& p) : elem_(elem), p_(p) {}
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    SP_CUDA(LaunchPad(elem_, in[0], out[0], p_, env.stream));
    return Status::Ok();
  }
  const char* family() const override { return "pad"; }

 private:
  size_t elem_;
  PadParams p_;
};

Result<PadMode> ModeOf(const ir::Node& node) {
  const std::string m = node.attr_string("mode", "constant");
  if (m == "constant") return PadMode::kConstant;
  if (m == "reflect") return PadMode::kReflect;
  if (m == "edge") return PadMode::kEdge;
  if (m == "wrap") return PadMode::kWrap;
  return InvalidArgument(node.Label(), ": unknown mode '", m, "' (expected constant, reflect, edge or wrap)");
}

// A host-known integer input, or Unsupported naming it.
Result<std::vector<int64_t>> HostInts(const KernelRequest& r, size_t i, const char* what) {
  const Tensor* t = r.in[i].host;
  if (t == nullptr) return Unsupported(r.node.Label(), ": ", what, " computed on the device");
  return ToInt64Vector(*t, r.node.Label() + ": " + what);
}

// (begin, end) pads of every logical axis, read as ops/tile_pad.cpp's PadsPerAxis does.
Result<std::vector<std::pair<int64_t, int64_t>>> PadsPerAxis(const KernelRequest& r, size_t rank) {
  const ir::Node& node = r.node;
  std::vector<int64_t> pads, axes;
  if (r.opset < 11) {
    if (node.has_attr("pads")) {
      SP_ASSIGN_OR_RETURN(pads, node.required_ints("pads"));
    } else if (node.has_attr("paddings")) {
      SP_ASSIGN_OR_RETURN(pads, node.required_ints("paddings"));
    } else {
      return InvalidArgument(node.Label(), ": missing required attribute 'pads'");
    }
  } else {
    if (r.in.size() < 2 || !r.in[1].present) return InvalidArgument(node.Label(), ": missing required input 'pads'");
    SP_ASSIGN_OR_RETURN(pads, HostInts(r, 1, "pads"));
  }
  if (r.opset >= 11 && r.in.size() > 3 && r.in[3].present) {
    SP_ASSIGN_OR_RETURN(axes, HostInts(r, 3, "axes"));
  } else {
    for (size_t d = 0; d < rank; ++d) axes.push_back(static_cast<int64_t>(d));
  }
  if (pads.size() != 2 * axes.size())
    return InvalidArgument(node.Label(), ": pads has ", pads.size(), " values, expected ", 2 * axes.size());
  const int64_t n = static_cast<int64_t>(rank);
  std::vector<std::pair<int64_t, int64_t>> per(rank, {0, 0});
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = axes[i] < 0 ? axes[i] + n : axes[i];
    if (a < 0 || a >= n) return InvalidArgument(node.Label(), ": axis ", axes[i], " is out of range for rank ", n);
    if (seen[static_cast<size_t>(a)]) return InvalidArgument(node.Label(), ": axis ", axes[i], " appears twice");
    seen[static_cast<size_t>(a)] = true;
    per[static_cast<size_t>(a)] = {pads[i], pads[i + axes.size()]};
  }
  return per;
}

// The constant as the element type's raw bits (converted on the host, like the reference).
Result<uint64_t> ConstantBits(const KernelRequest& r, DType dtype) {
  const ir::Node& node = r.node;
  const size_t es = DTypeSize(dtype);
  uint64_t bits = 0;
  if (r.opset >= 11) {
    if (r.in.size() < 3 || !r.in[2].present) return bits;
    const Tensor* c = r.in[2].host;
    if (c == nullptr) return Unsupported(node.Label(), ": constant_value computed on the device");
    if (c->numel() == 0) return bits;
    if (c->dtype() == dtype) {
      std::memcpy(&bits, c->raw(), es);
    } else {
      auto v = CastTensor(*c, dtype);
      if (!v.ok()) return Unsupported(node.Label(), ": constant_value of type ", DTypeName(c->dtype()));
      std::memcpy(&bits, v->raw(), es);
    }
    return bits;
  }
  const double v = node.attr_float("value", 0.f);
  Status st = DispatchDType(dtype, [&]<class T>() {
    const T t = ConvertElement<T>(v);
    std::memcpy(&bits, &t, sizeof(T));
  });
  if (!st.ok()) return Unsupported(node.Label(), ": constant of type ", DTypeName(dtype));
  return bits;
}

// One dim in memory order, before merging.
struct PadDim {
  int64_t n, begin, end, stride;
  bool padded() const { return begin != 0 || end != 0; }
};

}  // namespace

Result<KernelChoice> MakePad(const KernelRequest& r) {
  const ir::Node& node = r.node;
  if (node.op_type != "Pad") return Unsupported(node.Label(), ": not Pad");
  if (r.in.empty() || !r.in[0].present || r.out.empty()) return Unsupported(node.Label(), ": no data input");
  const KernelInput& x = r.in[0];
  const Shape& xs = x.shape;
  const size_t rank = xs.size();
  const size_t es = DTypeSize(x.dtype);
  if (!IsStorableDType(x.dtype) || (es != 1 && es != 2 && es != 4 && es != 8))
    return Unsupported(node.Label(), ": no CUDA kernel for ", DTypeName(x.dtype));
  if (r.out[0].dtype != x.dtype) return Unsupported(node.Label(), ": output type differs from the input's");
  // Channels-last: memory is [N, H, W, C] on both sides while shapes stay logical NCHW.
  const bool nhwc = r.opt.input_nhwc(0);
  if (nhwc != r.opt.out_nhwc) return Unsupported(node.Label(), ": layout (one side channels-last)");
  if (nhwc && rank != 4) return Unsupported(node.Label(), ": layout (channels-last ", rank, "-D tensor)");
  SP_ASSIGN_OR_RETURN(PadMode mode, ModeOf(node));
  SP_ASSIGN_OR_RETURN(auto per, PadsPerAxis(r, rank));
  PadParams p;
  p.mode = mode;
  p.in_numel = NumElements(xs);
  if (mode == PadMode::kConstant) {
    SP_ASSIGN_OR_RETURN(p.value, ConstantBits(r, x.dtype));
  }

  // Memory order: logical axis perm[k] is memory dim k.
  std::vector<size_t> perm(rank);
  for (size_t k = 0; k < rank; ++k) perm[k] = k;
  if (nhwc) perm = {0, 2, 3, 1};
  Shape mem(rank);
  for (size_t k = 0; k < rank; ++k) mem[k] = xs[perm[k]];
  const std::vector<int64_t> strides = Packed(mem);
  std::vector<PadDim> dims;
  Shape out(rank);
  for (size_t k = 0; k < rank; ++k) {
    const auto [b, e] = per[perm[k]];
    const int64_t n = mem[k], size = n + b + e;
    const int64_t kept = n - std::max<int64_t>(0, -b) - std::max<int64_t>(0, -e);
    if (size < 0 || kept < 0)
      return InvalidArgument(node.Label(), ": pads (", b, ", ", e, ") on axis ", perm[k], " of size ", n,
                             " crop more than the axis holds");
    if (mode != PadMode::kConstant && kept == 0 && size > 0)
      return InvalidArgument(node.Label(), ": cannot pad an empty axis ", perm[k], " in non-constant mode");
    out[perm[k]] = size;
    p.in_base += std::max<int64_t>(0, -b) * strides[k];
    dims.push_back({n, b, e, strides[k]});
  }
  if (out != r.out[0].shape)
    return Unsupported(node.Label(), ": output shape ", ShapeToString(r.out[0].shape), ", expected ",
                       ShapeToString(out));
  if (NumElements(out) == 0) {  // nothing to write
    p.rank = 1;
    return KernelChoice{false, std::make_unique<PadKernel>(es, p)};
  }
  // Unpadded neighbours merge into one dim (packed strides), unpadded size-1 dims drop out:
  // fewer divisions per element.
  std::vector<PadDim> merged;
  for (const PadDim& d : dims) {
    if (!d.padded() && d.n == 1) continue;
    if (!d.padded() && !merged.empty() && !merged.back().padded()) {
      merged.back().n *= d.n;
      merged.back().stride = d.stride;
    } else {
      merged.push_back(d);
    }
  }
  if (merged.empty()) merged.push_back({1, 0, 0, 1});
  if (merged.size() > static_cast<size_t>(kMaxRank))
    return Unsupported(node.Label(), ": ", merged.size(), " dims after merging the unpadded ones (at most ", kMaxRank,
                       ")");
  p.rank = static_cast<int>(merged.size());
  for (size_t k = 0; k < merged.size(); ++k) {
    const PadDim& d = merged[k];
    p.out_dims[k] = d.n + d.begin + d.end;
    p.kept[k] = d.n - std::max<int64_t>(0, -d.begin) - std::max<int64_t>(0, -d.end);
    p.lo[k] = std::max<int64_t>(0, d.begin);
    p.in_stride[k] = d.stride;
  }
  return KernelChoice{false, std::make_unique<PadKernel>(es, p)};
}

}  // namespace sampan::cuda
