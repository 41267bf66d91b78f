#include <optional>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/index_kernel.h"
#include "backends/cuda/index_kernel_util.h"
#include "backends/cuda/pattern_ops.h"
#include "backends/cuda/topk.h"

namespace sampan::cuda {
namespace {

using index_detail::Axis;
using index_detail::ElementSize;
using index_detail::Plain;
using index_detail::Product;

// Kernels whose Run is one launch with fixed parameters.
template <class Launch>
class SimpleKernel : public NodeKernel {
 public:
  SimpleKernel(const char* fam, Launch launch, size_t ws = 0) : fam_(fam), launch_(launch), ws_(ws) {}
  size_t workspace() const override { return ws_; }
  Status Run(const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) override {
    if (env.workspace_bytes < ws_) return Internal(fam_, " needs ", ws_, " workspace bytes, has ", env.workspace_bytes);
    SP_CUDA(launch_(env, in, out));
    return Status::Ok();
  }
  const char* family() const override { return fam_; }

 private:
  const char* fam_;
  Launch launch_;
  size_t ws_;
};

template <class Launch>
KernelChoice Simple(const char* fam, Launch launch, size_t ws = 0) {
  return KernelChoice{false, std::make_unique<SimpleKernel<Launch>>(fam, launch, ws)};
}

std::optional<IndexType> IndexTypeOf(DType t) {
  switch (t) {
    case DType::kInt8:
      return IndexType::kI8;
    case DType::kUInt8:
      return IndexType::kU8;
    case DType::kInt16:
      return IndexType::kI16;
    case DType::kUInt16:
      return IndexType::kU16;
    case DType::kInt32:
      return IndexType::kI32;
    case DType::kUInt32:
      return IndexType::kU32;
    case DType::kInt64:
      return IndexType::kI64;
    case DType::kUInt64:
      return IndexType::kU64;
    case DType::kFloat16:
      return IndexType::kF16;
    case DType::kBFloat16:
      return IndexType::kBF16;
    case DType::kFloat32:
      return IndexType::kF32;
    case DType::kFloat64:
      return IndexType::kF64;
    default:
      return std::nullopt;
  }
}

}  // namespace

Result<KernelChoice> MakeOneHot(const KernelRequest& r) {
  const ir::Node& node = r.node;
  SP_RETURN_IF_ERROR(Plain(r, 3));
  const auto it = IndexTypeOf(r.in[0].dtype);
  if (!it) return Unsupported(node.Label(), ": indices of type ", DTypeName(r.in[0].dtype));
  SP_ASSIGN_OR_RETURN(size_t elem, ElementSize(r, 2));
  if (NumElements(r.in[2].shape) != 2 || r.out[0].dtype != r.in[2].dtype)
    return Unsupported(node.Label(), ": values must be [off, on] of the output type");
  const Shape& ind = r.in[0].shape;
  const Shape& y = r.out[0].shape;
  if (y.size() != ind.size() + 1) return Unsupported(node.Label(), ": output rank");
  SP_ASSIGN_OR_RETURN(int64_t axis, Axis(node, -1, y.size()));
  const size_t a = static_cast<size_t>(axis);
  const int64_t outer = Product(ind, 0, a), depth = y[a], inner = Product(ind, a, ind.size());
  const IndexType t = *it;
  return Simple("onehot", [=](const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) {
    return LaunchOneHot(t, elem, in[0], in[2], out[0], outer, depth, inner, env.stream);
  });
}

Result<KernelChoice> MakeTrilu(const KernelRequest& r) {
  const ir::Node& node = r.node;
  SP_RETURN_IF_ERROR(Plain(r, 1));
  SP_ASSIGN_OR_RETURN(size_t elem, ElementSize(r, 0));
  const Shape& x = r.in[0].shape;
  if (x.size() < 2 || r.out[0].shape != x || r.out[0].dtype != r.in[0].dtype)
    return Unsupported(node.Label(), ": Trilu shape or type");
  int64_t k = 0;
  bool k_device = false;
  if (r.in.size() > 1 && r.in[1].present) {
    if (r.in[1].dtype != DType::kInt64 || NumElements(r.in[1].shape) != 1)
      return Unsupported(node.Label(), ": k must be one int64");
    if (r.in[1].host)
      k = ElementAsInt64(*r.in[1].host, 0);
    else
      k_device = true;  // computed on the device: the kernel reads it
  }
  const bool upper = node.attr_int("upper", 1) != 0;
  const int64_t rows = x[x.size() - 2], cols = x.back(), mats = Product(x, 0, x.size() - 2);
  return Simple("trilu", [=](const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) {
    return LaunchTrilu(elem, in[0], out[0], mats, rows, cols, k,
                       k_device ? static_cast<const int64_t*>(in[1]) : nullptr, upper, env.stream);
  });
}

Result<KernelChoice> MakeRange(const KernelRequest& r) {
  const ir::Node& node = r.node;
  SP_RETURN_IF_ERROR(Plain(r, 3));
  std::optional<RangeType> t;
  switch (r.in[0].dtype) {
    case DType::kFloat32:
      t = RangeType::kF32;
      break;
    case DType::kFloat64:
      t = RangeType::kF64;
      break;
    case DType::kInt16:
      t = RangeType::kI16;
      break;
    case DType::kInt32:
      t = RangeType::kI32;
      break;
    case DType::kInt64:
      t = RangeType::kI64;
      break;
    default:
      return Unsupported(node.Label(), ": Range of ", DTypeName(r.in[0].dtype));
  }
  for (size_t i = 0; i < 3; ++i)
    if (r.in[i].dtype != r.in[0].dtype || NumElements(r.in[i].shape) != 1)
      return Unsupported(node.Label(), ": start, limit and delta must be scalars of one type");
  if (r.out[0].dtype != r.in[0].dtype || r.out[0].shape.size() != 1) return Unsupported(node.Label(), ": output");
  const int64_t n = r.out[0].shape[0];
  const RangeType rt = *t;
  return Simple("range", [=](const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) {
    return LaunchRange(rt, in[0], in[2], out[0], n, env.stream);
  });
}

Result<KernelChoice> MakeTopK(const KernelRequest& r) {
  const ir::Node& node = r.node;
  SP_RETURN_IF_ERROR(Plain(r, 1));
  std::optional<TopKType> t;
  switch (r.in[0].dtype) {
    case DType::kFloat32:
      t = TopKType::kF32;
      break;
    case DType::kFloat16:
      t = TopKType::kF16;
      break;
    case DType::kBFloat16:
      t = TopKType::kBF16;
      break;
    case DType::kFloat64:
      t = TopKType::kF64;
      break;
    case DType::kInt32:
      t = TopKType::kI32;
      break;
    case DType::kInt64:
      t = TopKType::kI64;
      break;
    default:
      return Unsupported(node.Label(), ": TopK of ", DTypeName(r.in[0].dtype));
  }
  const Shape& x = r.in[0].shape;
  if (x.empty() || r.out.size() < 2) return Unsupported(node.Label(), ": TopK rank or outputs");
  SP_ASSIGN_OR_RETURN(int64_t axis, Axis(node, -1, x.size()));
  const size_t a = static_cast<size_t>(axis);
  // k is the outputs' extent along the axis (whatever form k took).
  const bool has_values = node.output(0) != nullptr, has_indices = node.output(1) != nullptr;
  const KernelOutput& ref = has_values ? r.out[0] : r.out[1];
  if ((has_values && r.out[0].dtype != r.in[0].dtype) || (has_indices && r.out[1].dtype != DType::kInt64) ||
      ref.shape.size() != x.size())
    return Unsupported(node.Label(), ": TopK output types");
  TopKShape s;
  s.outer = Product(x, 0, a);
  s.n = x[a];
  s.inner = Product(x, a + 1, x.size());
  s.k = ref.shape[a];
  s.largest = r.opset < 11 || node.attr_int("largest", 1) != 0;
  if (s.k > s.n || s.n >= (int64_t(1) << 31)) return Unsupported(node.Label(), ": TopK k ", s.k, " of ", s.n);
  const TopKType tt = *t;
  return Simple(
      "topk",
      [=](const RunEnv& env, const std::vector<const void*>& in, const std::vector<void*>& out) {
        return LaunchTopK(tt, in[0], out[0], static_cast<int64_t*>(out.size() > 1 ? out[1] : nullptr), s, env.workspace,
                          env.workspace_bytes, env.stream);
      },
      TopKWorkspace(tt, s));
}

}  // namespace sampan::cuda
